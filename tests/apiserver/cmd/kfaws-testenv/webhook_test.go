package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
)

var testNow = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)

// tokenFor builds a token whose URL has the given query (a valid EKS query when nil).
func tokenFor(base string, edit func(q url.Values)) string {
	q := url.Values{
		"Action":              {"GetCallerIdentity"},
		"Version":             {"2011-06-15"},
		"X-Amz-Algorithm":     {"AWS4-HMAC-SHA256"},
		"X-Amz-Credential":    {"400000000123/20261130/us-east-1/sts/aws4_request"},
		"X-Amz-Date":          {testNow.Add(-time.Minute).Format(amzDateLayout)},
		"X-Amz-Expires":       {"60"},
		"X-Amz-SignedHeaders": {"host;x-k8s-aws-id"},
		"X-Amz-Signature":     {strings.Repeat("ab", 32)},
	}
	if edit != nil {
		edit(q)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(base+"/?"+q.Encode()))
}

func testAuthenticator(sts string) *eksAuthenticator {
	u, _ := url.Parse(sts)
	return &eksAuthenticator{
		sts: u, clusterName: "ml", control: sts + "/_kfaws",
		client: &http.Client{Timeout: 5 * time.Second},
		now:    func() time.Time { return testNow },
		log:    log.New(io.Discard, "", 0),
	}
}

func TestValidateAcceptsAnEKSToken(t *testing.T) {
	a := testAuthenticator("http://127.0.0.1:4566")
	p, err := a.validate(tokenFor("http://127.0.0.1:4566", nil))
	if err != nil {
		t.Fatal(err)
	}
	if p.region != "us-east-1" || p.url.Host != "127.0.0.1:4566" {
		t.Fatalf("got %+v", p)
	}
}

func TestValidateRefusesWhatTheAuthenticatorRefuses(t *testing.T) {
	a := testAuthenticator("http://127.0.0.1:4566")
	ok := "http://127.0.0.1:4566"
	cases := []struct {
		name, token, want string
	}{
		{"prefix", "k8s-aws-v2." + strings.TrimPrefix(tokenFor(ok, nil), tokenPrefix), "does not start with"},
		{"base64", tokenPrefix + "***", "base64url"},
		{"padding", tokenFor(ok, nil) + "=", "base64url"},
		{"not a URL", tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte("http://127.0.0.1:4566/?X-Amz-Signature=abc\f")), "not hold a valid URL"},
		{"other host", tokenFor("http://sts.amazonaws.com", nil), "is not the STS endpoint"},
		{"other scheme", tokenFor("https://127.0.0.1:4566", nil), "is not the STS endpoint"},
		{"too long", tokenPrefix + strings.Repeat("A", maxTokenBytes), "more than"},
		{"action", tokenFor(ok, func(q url.Values) { q.Set("Action", "AssumeRole") }), "not GetCallerIdentity"},
		{"version", tokenFor(ok, func(q url.Values) { q.Set("Version", "2012-01-01") }), "not 2011-06-15"},
		{"extra parameter", tokenFor(ok, func(q url.Values) { q.Set("RoleArn", "arn:aws:iam::1:role/x") }), "not allowed"},
		{"repeated parameter", tokenFor(ok, func(q url.Values) { q.Add("Action", "GetCallerIdentity") }), "repeats"},
		{"unsigned cluster id", tokenFor(ok, func(q url.Values) { q.Set("X-Amz-SignedHeaders", "host") }), "does not sign the x-k8s-aws-id"},
		{"not presigned", tokenFor(ok, func(q url.Values) { q.Del("X-Amz-Signature") }), "not presigned"},
		{"expired", tokenFor(ok, func(q url.Values) { q.Set("X-Amz-Date", testNow.Add(-16*time.Minute).Format(amzDateLayout)) }), "expired"},
		{"future", tokenFor(ok, func(q url.Values) { q.Set("X-Amz-Date", testNow.Add(16*time.Minute).Format(amzDateLayout)) }), "future"},
		{"bad date", tokenFor(ok, func(q url.Values) { q.Set("X-Amz-Date", "yesterday") }), "X-Amz-Date"},
		{"other service", tokenFor(ok, func(q url.Values) {
			q.Set("X-Amz-Credential", "400000000123/20261130/us-east-1/s3/aws4_request")
		}), "X-Amz-Credential"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.validate(c.token)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
	// 14 minutes old is still valid (the client's token lifetime).
	if _, err := a.validate(tokenFor(ok, func(q url.Values) { q.Set("X-Amz-Date", testNow.Add(-14*time.Minute).Format(amzDateLayout)) })); err != nil {
		t.Fatal(err)
	}
}

func TestPathMustBeRoot(t *testing.T) {
	a := testAuthenticator("http://127.0.0.1:4566")
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte("http://127.0.0.1:4566/x?Action=GetCallerIdentity"))
	if _, err := a.validate(token); err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("got %v", err)
	}
}

func TestCanonicalARN(t *testing.T) {
	for in, want := range map[string]string{
		"arn:aws:sts::400000000123:assumed-role/admin/session-1": "arn:aws:iam::400000000123:role/admin",
		"arn:aws:iam::400000000123:user/alice":                   "arn:aws:iam::400000000123:user/alice",
		"arn:aws:sts::400000000123:user/moto":                    "arn:aws:sts::400000000123:user/moto",
		"arn:aws-cn:sts::400000000123:assumed-role/r/s":          "arn:aws-cn:iam::400000000123:role/r",
	} {
		if got := canonicalARN(in); got != want {
			t.Errorf("canonicalARN(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeSTS answers GetCallerIdentity with arn (or status) and the control API's
// creator lookup with creator; it records the x-k8s-aws-id it was sent.
func fakeSTS(t *testing.T, status int, arn, creator string) (*httptest.Server, *string) {
	seen := new(string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			*seen = r.Header.Get(clusterIDHeader)
			if status != http.StatusOK {
				w.WriteHeader(status)
				io.WriteString(w, "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code></Error></ErrorResponse>")
				return
			}
			w.Header().Set("Content-Type", "text/xml")
			io.WriteString(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>`+
				`<UserId>AIDAEXAMPLE</UserId><Account>400000000123</Account><Arn>`+arn+`</Arn></GetCallerIdentityResult></GetCallerIdentityResponse>`)
		case "/_kfaws/eks/cluster-creator":
			q := r.URL.Query()
			if q.Get("account_id") != "400000000123" || q.Get("region") != "us-east-1" || q.Get("name") != "ml" {
				t.Errorf("creator lookup with %v", q)
			}
			json.NewEncoder(w).Encode(map[string]string{"arn": creator})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func review(t *testing.T, a *eksAuthenticator, token string) authv1.TokenReview {
	body, _ := json.Marshal(authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: token}})
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenreview", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out authv1.TokenReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Kind != "TokenReview" || out.APIVersion != "authentication.k8s.io/v1" {
		t.Fatalf("answered %s %s", out.APIVersion, out.Kind)
	}
	return out
}

func TestTheCreatorIsAuthenticatedAsSystemMasters(t *testing.T) {
	arn := "arn:aws:sts::400000000123:assumed-role/admin/s1"
	srv, seen := fakeSTS(t, http.StatusOK, arn, "arn:aws:sts::400000000123:assumed-role/admin/other-session")
	a := testAuthenticator(srv.URL)
	out := review(t, a, tokenFor(srv.URL, nil))
	if !out.Status.Authenticated || out.Status.Error != "" {
		t.Fatalf("not authenticated: %+v", out.Status)
	}
	if out.Status.User.Username != arn || len(out.Status.User.Groups) != 1 || out.Status.User.Groups[0] != "system:masters" {
		t.Fatalf("user %+v", out.Status.User)
	}
	if *seen != "ml" {
		t.Fatalf("STS was sent x-k8s-aws-id %q, want the configured cluster name", *seen)
	}
}

func TestAnotherPrincipalIsRefused(t *testing.T) {
	srv, _ := fakeSTS(t, http.StatusOK, "arn:aws:iam::400000000123:user/bob", "arn:aws:iam::400000000123:user/alice")
	out := review(t, testAuthenticator(srv.URL), tokenFor(srv.URL, nil))
	if out.Status.Authenticated || !strings.Contains(out.Status.Error, "not mapped") {
		t.Fatalf("%+v", out.Status)
	}
}

func TestATokenSTSRefusesIsRefused(t *testing.T) {
	srv, _ := fakeSTS(t, http.StatusForbidden, "", "")
	out := review(t, testAuthenticator(srv.URL), tokenFor(srv.URL, nil))
	if out.Status.Authenticated || !strings.Contains(out.Status.Error, "HTTP 403") {
		t.Fatalf("%+v", out.Status)
	}
}

func TestAMalformedTokenIsRefusedWithoutCallingSTS(t *testing.T) {
	srv, seen := fakeSTS(t, http.StatusOK, "arn:aws:iam::400000000123:user/alice", "arn:aws:iam::400000000123:user/alice")
	out := review(t, testAuthenticator(srv.URL), "k8s-aws-v1.!!")
	if out.Status.Authenticated || *seen != "" {
		t.Fatalf("%+v, STS called: %v", out.Status, *seen != "")
	}
	if strings.Contains(out.Status.Error, "k8s-aws-v1.!!") {
		t.Fatalf("the error repeats the token: %s", out.Status.Error)
	}
	secret := "X-Amz-Signature=0123456789abcdef"
	out = review(t, testAuthenticator(srv.URL), tokenPrefix+base64.RawURLEncoding.EncodeToString([]byte(srv.URL+"/?"+secret+"\f")))
	if out.Status.Authenticated || strings.Contains(out.Status.Error, secret) {
		t.Fatalf("the error repeats the signature: %s", out.Status.Error)
	}
}
