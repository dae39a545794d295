package main

// The emulated EKS cluster's authenticator: a TokenReview webhook
// (authentication.k8s.io/v1) that checks `k8s-aws-v1.` tokens the way EKS's
// aws-iam-authenticator does and asks the AWS emulator's STS who signed them.
//
// A token is `k8s-aws-v1.` + base64url (no padding) of a presigned STS
// GetCallerIdentity URL whose signature covers the header `x-k8s-aws-id:
// <cluster name>` (https://github.com/kubernetes-sigs/aws-iam-authenticator#how-does-it-work).
// The webhook checks the URL's shape, then performs the GET itself with the
// header set to *its* cluster name: a token signed for another cluster fails
// STS's signature check, so the header's value never needs to be in the URL.
// Kubernetes webhook token authentication:
// https://kubernetes.io/docs/reference/access-authn-authz/authentication/#webhook-token-authentication
//
// Mapping (EKS access entries, https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html):
// the IAM principal that created the cluster (recorded by the emulator at
// CreateCluster) is authenticated as username = the ARN STS answered, groups
// [system:masters] (EKS grants the creator cluster-admin). Any other principal
// is refused, as EKS refuses a principal with no access entry. Assumed-role
// sessions are compared by their role (arn:aws:sts::A:assumed-role/R/S is
// arn:aws:iam::A:role/R), as aws-iam-authenticator canonicalises them.

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
)

const (
	tokenPrefix       = "k8s-aws-v1."
	clusterIDHeader   = "x-k8s-aws-id"
	maxTokenBytes     = 4096             // aws-iam-authenticator maxTokenLenBytes
	presignedValidity = 15 * time.Minute // STS' window, which the authenticator enforces too
	amzDateLayout     = "20060102T150405Z"
)

// allowedQuery are the only parameters a token's URL may carry
// (aws-iam-authenticator's parameter allow-list): nothing but a
// GetCallerIdentity can be smuggled through the webhook.
var allowedQuery = []string{
	"action", "version", "x-amz-algorithm", "x-amz-credential", "x-amz-date",
	"x-amz-expires", "x-amz-security-token", "x-amz-signature", "x-amz-signedheaders",
}

// eksAuthenticator validates EKS tokens against one STS endpoint for one cluster.
type eksAuthenticator struct {
	sts         *url.URL // scheme and host every token's URL must have
	clusterName string   // sent as x-k8s-aws-id
	control     string   // the emulator's control API, for cluster creators
	client      *http.Client
	now         func() time.Time
	log         *log.Logger
}

// presigned is what a token's URL says.
type presigned struct {
	url     *url.URL
	account string // from X-Amz-Credential's access key when it is an account id; informational
	region  string // X-Amz-Credential's scope
}

// validate checks a token's shape without any network call.
func (a *eksAuthenticator) validate(token string) (*presigned, error) {
	if len(token) > maxTokenBytes {
		return nil, fmt.Errorf("token is %d bytes, more than %d", len(token), maxTokenBytes)
	}
	body, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return nil, fmt.Errorf("token does not start with %q", tokenPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("token is not base64url without padding: %w", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		// Not %w: url's error quotes the whole URL, signature included.
		return nil, errors.New("token does not hold a valid URL")
	}
	if u.Scheme != a.sts.Scheme || !strings.EqualFold(u.Host, a.sts.Host) {
		return nil, fmt.Errorf("token URL %s://%s is not the STS endpoint %s://%s", u.Scheme, u.Host, a.sts.Scheme, a.sts.Host)
	}
	if u.Path != "/" {
		return nil, fmt.Errorf("token URL path is %q, not /", u.Path)
	}
	if u.User != nil || u.Fragment != "" {
		return nil, errors.New("token URL carries user info or a fragment")
	}
	query := map[string]string{}
	for key, values := range u.Query() {
		lower := strings.ToLower(key)
		if !slices.Contains(allowedQuery, lower) {
			return nil, fmt.Errorf("token URL has the query parameter %q, which is not allowed", key)
		}
		if _, dup := query[lower]; dup || len(values) != 1 {
			return nil, fmt.Errorf("token URL repeats the query parameter %q", key)
		}
		query[lower] = values[0]
	}
	if query["action"] != "GetCallerIdentity" {
		return nil, fmt.Errorf("token URL action is %q, not GetCallerIdentity", query["action"])
	}
	if query["version"] != "2011-06-15" {
		return nil, fmt.Errorf("token URL version is %q, not 2011-06-15", query["version"])
	}
	if query["x-amz-signature"] == "" {
		return nil, errors.New("token URL is not presigned (no X-Amz-Signature)")
	}
	if !slices.Contains(strings.Split(query["x-amz-signedheaders"], ";"), clusterIDHeader) {
		return nil, fmt.Errorf("token URL does not sign the %s header (X-Amz-SignedHeaders %q)", clusterIDHeader, query["x-amz-signedheaders"])
	}
	signedAt, err := time.Parse(amzDateLayout, query["x-amz-date"])
	if err != nil {
		return nil, fmt.Errorf("token URL X-Amz-Date %q is not yyyymmddTHHMMSSZ", query["x-amz-date"])
	}
	now := a.now()
	if now.Sub(signedAt) > presignedValidity {
		return nil, fmt.Errorf("token expired: signed at %s, valid for %s", signedAt.Format(time.RFC3339), presignedValidity)
	}
	if signedAt.Sub(now) > presignedValidity {
		return nil, fmt.Errorf("token signed in the future (%s)", signedAt.Format(time.RFC3339))
	}
	scope := strings.Split(query["x-amz-credential"], "/")
	if len(scope) != 5 || scope[3] != "sts" || scope[4] != "aws4_request" {
		return nil, fmt.Errorf("token URL X-Amz-Credential %q is not KEY/date/region/sts/aws4_request", query["x-amz-credential"])
	}
	return &presigned{url: u, region: scope[2]}, nil
}

// callerIdentity is STS GetCallerIdentity's result.
type callerIdentity struct {
	Account string `xml:"GetCallerIdentityResult>Account" json:"Account"`
	Arn     string `xml:"GetCallerIdentityResult>Arn" json:"Arn"`
	UserID  string `xml:"GetCallerIdentityResult>UserId" json:"UserId"`
}

// stsAttempts bounds callSTS' retries of throttled and failed calls.
const stsAttempts = 5

// errRetryable marks an STS answer worth retrying: a transport error, HTTP
// 429 or 5xx, or a Throttling error (the AWS SDKs' standard retry mode
// retries these; https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html).
type errRetryable struct{ error }

// callSTS performs the presigned request with our cluster name in
// x-k8s-aws-id, retrying throttled and failed calls with backoff (100 ms,
// doubling) up to stsAttempts times, as aws-iam-authenticator's AWS client does.
func (a *eksAuthenticator) callSTS(p *presigned) (*callerIdentity, error) {
	var err error
	for attempt := 0; attempt < stsAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(100<<(attempt-1)) * time.Millisecond)
		}
		var id *callerIdentity
		id, err = a.callSTSOnce(p)
		var retry errRetryable
		if err == nil || !errors.As(err, &retry) {
			return id, err
		}
	}
	return nil, err
}

func (a *eksAuthenticator) callSTSOnce(p *presigned) (*callerIdentity, error) {
	req, err := http.NewRequest(http.MethodGet, p.url.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(clusterIDHeader, a.clusterName)
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, errRetryable{fmt.Errorf("calling STS: %w", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading STS' answer: %w", err)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 ||
		strings.Contains(string(body), "Throttling") {
		return nil, errRetryable{fmt.Errorf("STS failed: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("STS refused the token's request: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var id callerIdentity
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "application/json" {
		var wrapped struct {
			Response struct {
				Result callerIdentity `json:"GetCallerIdentityResult"`
			} `json:"GetCallerIdentityResponse"`
		}
		err = json.Unmarshal(body, &wrapped)
		id = wrapped.Response.Result
	} else {
		err = xml.Unmarshal(body, &id)
	}
	if err != nil || id.Arn == "" || id.Account == "" {
		return nil, fmt.Errorf("STS answered no identity (%v): %s", err, strings.TrimSpace(string(body)))
	}
	return &id, nil
}

// canonicalARN maps an assumed-role session ARN to its role's ARN; other ARNs are unchanged.
func canonicalARN(arn string) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[2] != "sts" {
		return arn
	}
	resource := strings.Split(parts[5], "/")
	if len(resource) >= 3 && resource[0] == "assumed-role" {
		return fmt.Sprintf("arn:%s:iam::%s:role/%s", parts[1], parts[4], resource[1])
	}
	return arn
}

// clusterCreator asks the emulator who created our cluster in account/region.
func (a *eksAuthenticator) clusterCreator(account, region string) (string, error) {
	q := url.Values{"account_id": {account}, "region": {region}, "name": {a.clusterName}}
	resp, err := a.client.Get(a.control + "/eks/cluster-creator?" + q.Encode())
	if err != nil {
		return "", fmt.Errorf("asking the AWS emulator for the cluster's creator: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the AWS emulator knows no creator of cluster %q in account %s region %s: HTTP %d: %s",
			a.clusterName, account, region, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var out struct {
		Arn string `json:"arn"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "", fmt.Errorf("the AWS emulator's creator answer: %w", err)
	}
	return out.Arn, nil
}

// authenticate validates, asks STS, and maps the identity.
func (a *eksAuthenticator) authenticate(token string) (authv1.UserInfo, error) {
	p, err := a.validate(token)
	if err != nil {
		return authv1.UserInfo{}, err
	}
	id, err := a.callSTS(p)
	if err != nil {
		return authv1.UserInfo{}, err
	}
	creator, err := a.clusterCreator(id.Account, p.region)
	if err != nil {
		return authv1.UserInfo{}, err
	}
	if creator == "" || canonicalARN(creator) != canonicalARN(id.Arn) {
		return authv1.UserInfo{}, fmt.Errorf("ARN %s is not mapped: only the cluster's creator (%s) has access", id.Arn, creator)
	}
	return authv1.UserInfo{
		Username: id.Arn,
		UID:      fmt.Sprintf("aws-iam-authenticator:%s:%s", id.Account, id.UserID),
		Groups:   []string{"system:masters"},
		Extra: map[string]authv1.ExtraValue{
			"arn":          {id.Arn},
			"canonicalArn": {canonicalARN(id.Arn)},
		},
	}, nil
}

// ServeHTTP answers TokenReview requests.
func (a *eksAuthenticator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a TokenReview", http.StatusMethodNotAllowed)
		return
	}
	var review authv1.TokenReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil {
		http.Error(w, "the body is not a TokenReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	user, err := a.authenticate(review.Spec.Token)
	review.Status = authv1.TokenReviewStatus{}
	if err != nil {
		// Never the token itself: it is a credential for 15 minutes.
		a.log.Printf("refused: %v", err)
		review.Status.Error = err.Error()
	} else {
		a.log.Printf("authenticated %s groups %v", user.Username, user.Groups)
		review.Status.Authenticated = true
		review.Status.User = user
	}
	review.APIVersion = authv1.SchemeGroupVersion.String()
	review.Kind = "TokenReview"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// tokenWebhook is the running webhook server.
type tokenWebhook struct {
	server  *http.Server
	url     string // https://127.0.0.1:PORT/tokenreview
	logFile io.Closer
}

// startTokenWebhook serves the authenticator over HTTPS on a free loopback
// port with a certificate from the harness CA, and writes the kubeconfig-format
// file kube-apiserver's --authentication-token-webhook-config-file reads.
func startTokenWebhook(o *startOptions, p *pki) (*tokenWebhook, error) {
	sts, err := url.Parse(o.awsSTSEndpoint)
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(o.dir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, "token-webhook.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	auth := &eksAuthenticator{
		sts:         sts,
		clusterName: o.eksClusterName,
		control:     strings.TrimRight(o.awsEmulatorControl, "/"),
		client:      &http.Client{Timeout: 10 * time.Second},
		now:         time.Now,
		log:         log.New(logFile, "", log.LstdFlags|log.LUTC),
	}
	cert, err := tls.LoadX509KeyPair(p.webhookCert, p.webhookKey)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("listening for the token webhook: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tokenreview", auth)
	wh := &tokenWebhook{
		server:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: auth.log},
		url:     "https://" + listener.Addr().String() + "/tokenreview",
		logFile: logFile,
	}
	go func() { _ = wh.server.Serve(listener) }()

	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // JSON strings are YAML scalars
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: eks-token-webhook
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kube-apiserver
  user: {}
contexts:
- name: webhook
  context:
    cluster: eks-token-webhook
    user: kube-apiserver
current-context: webhook
`, q(wh.url), q(p.caCert))
	path := filepath.Join(o.dir, "token-webhook.kubeconfig")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		wh.close()
		return nil, err
	}
	o.tokenWebhookConfig = path
	return wh, nil
}

func (wh *tokenWebhook) close() {
	_ = wh.server.Close()
	_ = wh.logFile.Close()
}
