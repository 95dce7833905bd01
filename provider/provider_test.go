package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestErrorsSurviveTheGRPCBoundary(t *testing.T) {
	for _, sentinel := range []error{ErrNotFound, ErrInvalidConfig, ErrNotConfigured, ErrUnavailable, errors.ErrUnsupported, context.Canceled, context.DeadlineExceeded} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			orig := fmt.Errorf("service default/x: %w", sentinel)
			got := fromStatus(toStatus(orig))
			if !errors.Is(got, sentinel) {
				t.Errorf("errors.Is(%v, %v) = false after the round trip", got, sentinel)
			}
			if got.Error() != orig.Error() {
				t.Errorf("message = %q, want %q", got.Error(), orig.Error())
			}
		})
	}
	if got := fromStatus(toStatus(errors.New("boom"))); got.Error() != "boom" || errors.Is(got, ErrNotFound) {
		t.Errorf("plain error round trip = %v", got)
	}
	if fromStatus(toStatus(nil)) != nil {
		t.Error("nil error did not stay nil")
	}
}

func TestEventsRoundTrip(t *testing.T) {
	svc := Service{Namespace: "default", Name: "bookstore"}
	eps := []Endpoint{{IP: netip.MustParseAddr("10.0.0.5"), Port: 14001, Labels: map[string]string{"version": "v1"}},
		{IP: netip.MustParseAddr("2001:db8::1"), Port: 80}}
	for name, ev := range map[string]Event{
		"updated":   Updated(svc, eps),
		"deleted":   Deleted(svc),
		"healthy":   HealthChanged(nil),
		"unhealthy": HealthChanged(errors.New("endpoints.yaml:3: bad port")),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := eventFromProto(eventToProto(ev))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ev, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeConfig(t *testing.T) {
	type inner struct {
		PollInterval string `json:"pollInterval"`
	}
	type conf struct {
		File  string           `json:"file"`
		Inner *inner           `json:"inner,omitempty"`
		Tags  map[string]inner `json:"tags,omitempty"`
	}
	for _, tc := range []struct {
		name, in, wantErr string
		want              conf
	}{
		{name: "ok", in: `{"file":"/x"}`, want: conf{File: "/x"}},
		{name: "empty", in: ``, want: conf{}},
		{name: "null", in: `null`, want: conf{}},
		{name: "unknown field", in: `{"fiel":"/x"}`, wantErr: `unknown field "fiel"`},
		{name: "wrong type", in: `{"file":3}`, wantErr: "file"},
		{name: "wrong case", in: `{"File":"/x"}`, wantErr: `unknown field "File" (did you mean "file"?`},
		{name: "wrong case nested", in: `{"inner":{"pollinterval":"1s"}}`, wantErr: `unknown field "inner.pollinterval" (did you mean "inner.pollInterval"?`},
		{name: "wrong case in map value", in: `{"tags":{"a":{"PollInterval":"1s"}}}`, wantErr: `"tags.a.PollInterval"`},
		{name: "nested ok", in: `{"inner":{"pollInterval":"1s"}}`, want: conf{Inner: &inner{PollInterval: "1s"}}},
		{name: "not json", in: `{`, wantErr: "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got conf
			err := DecodeConfig([]byte(tc.in), &got)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeConfig(%s) error = %v; want ErrInvalidConfig mentioning %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeConfig(%s) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"good service", Service{Namespace: "default", Name: "book-store"}.Validate(), true},
		{"upper case", Service{Namespace: "default", Name: "Bookstore"}.Validate(), false},
		{"empty namespace", Service{Name: "bookstore"}.Validate(), false},
		{"good endpoint", Endpoint{IP: netip.MustParseAddr("10.0.0.1"), Port: 1}.Validate(), true},
		{"port 0", Endpoint{IP: netip.MustParseAddr("10.0.0.1")}.Validate(), false},
		{"no ip", Endpoint{Port: 80}.Validate(), false},
	} {
		if (tc.err == nil) != tc.ok {
			t.Errorf("%s: error = %v, want ok=%v", tc.name, tc.err, tc.ok)
		}
	}
}
