package main

import (
	"fmt"
	"testing"
	"time"
)

func TestLeaseHeldNeedsAHolderAndARecentRenewal(t *testing.T) {
	lease := func(holder string, renewed time.Time) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{"holderIdentity":%q,"leaseDurationSeconds":60,"renewTime":%q}}`,
			holder, renewed.UTC().Format("2006-01-02T15:04:05.000000Z"))
	}
	now := time.Now()
	if err := leaseHeld(lease("kcm_1", now.Add(-time.Second))); err != nil {
		t.Errorf("lease renewed a second ago: %v", err)
	}
	if err := leaseHeld(lease("", now)); err == nil {
		t.Error("lease without a holder counted as held")
	}
	if err := leaseHeld(lease("kcm_1", now.Add(-2*time.Minute))); err == nil {
		t.Error("lease renewed two minutes ago (duration 60 s) counted as held")
	}
	if err := leaseHeld([]byte(`{"kind":"Status","code":404}`)); err == nil {
		t.Error("a Status answer counted as a held lease")
	}
}
