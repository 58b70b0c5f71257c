package driver

import (
	"reflect"
	"testing"
)

func TestBatchClaimsOrderAndUndecided(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	rows := []BatchRow{
		{Key: "d", Existing: Existing{Response: []byte("done"), Leased: false}},
		{Key: "a", Won: true, Token: 7},
		{Key: "c", Available: true, Existing: Existing{Response: []byte("old")}},
		{Key: "e", Existing: Existing{Leased: true}},
		{Key: "z", Won: true, Token: 9}, // not asked for: ignored
	}
	got := BatchClaims(keys, rows)
	want := []BatchClaim{
		{Claim: Claim{Won: true, Token: 7}, Decided: true},
		{}, // no row: committed while the claim waited, or purged
		{}, // available: taken over alone
		{Claim: Claim{Existing: Existing{Response: []byte("done")}}, Decided: true},
		{Claim: Claim{Existing: Existing{Leased: true}}, Decided: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("BatchClaims:\n got %+v\nwant %+v", got, want)
	}
}
