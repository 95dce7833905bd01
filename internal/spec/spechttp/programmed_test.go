package spechttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/store"
)

// fixedMachines reports the same machines for every Gateway.
type fixedMachines []gateway.Machine

func (f fixedMachines) GatewayMachines(mesh.MeshService) []gateway.Machine { return f }

// TestGatewayProgrammedStatus: the Programmed conditions of a Gateway and
// its listeners, as GET and list serve them, follow the machines connected as it, and a certificate
// problem a machine reports makes that listener's ResolvedRefs False.
func TestGatewayProgrammedStatus(t *testing.T) {
	const gw = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress, namespace: default}
spec:
  gatewayClassName: osm-vm
  listeners:
    - {name: web, port: 80, protocol: HTTP}
    - {name: shop, port: 443, protocol: HTTPS, hostname: shop.example.com, tls: {certificateRefs: [{name: shop-cert}]}}
`
	type cond struct {
		status metav1.ConditionStatus
		reason string
		msg    string
	}
	for _, tc := range []struct {
		name     string
		machines []gateway.Machine
		gateway  cond
		web      cond // listener web's Programmed
		shop     cond // listener shop's Programmed
		shopRefs cond // listener shop's ResolvedRefs
	}{
		{"no machine", nil,
			cond{metav1.ConditionFalse, "Pending", "install one with `osm-agent install --gateway ingress --service ingress --namespace default"},
			cond{metav1.ConditionFalse, "Pending", "no gateway machine"}, cond{metav1.ConditionFalse, "Pending", ""}, cond{metav1.ConditionTrue, "ResolvedRefs", ""}},
		{"connected, not acknowledged yet", []gateway.Machine{{Node: "a"}},
			cond{metav1.ConditionFalse, "Pending", "1 gateway machines connected; waiting"},
			cond{metav1.ConditionFalse, "Pending", ""}, cond{metav1.ConditionFalse, "Pending", ""}, cond{metav1.ConditionTrue, "ResolvedRefs", ""}},
		{"acknowledged", []gateway.Machine{{Node: "a", ACKed: true}, {Node: "b"}},
			cond{metav1.ConditionTrue, "Programmed", "configured on 1 of 2 connected gateway machines"},
			cond{metav1.ConditionTrue, "Programmed", ""}, cond{metav1.ConditionTrue, "Programmed", ""}, cond{metav1.ConditionTrue, "ResolvedRefs", ""}},
		{"rejected", []gateway.Machine{{Node: "a", Rejected: "Invalid path: /x/tls.crt"}},
			cond{metav1.ConditionFalse, "Invalid", "machine a rejected it: Invalid path: /x/tls.crt"},
			cond{metav1.ConditionFalse, "Invalid", "Invalid path"}, cond{metav1.ConditionFalse, "Invalid", ""}, cond{metav1.ConditionTrue, "ResolvedRefs", ""}},
		{"one of two rejected", []gateway.Machine{{Node: "a", ACKed: true}, {Node: "b", Rejected: "bad"}},
			cond{metav1.ConditionTrue, "Programmed", "configured on 1 of 2 connected gateway machines; machine b rejected it: bad"},
			cond{metav1.ConditionTrue, "Programmed", ""}, cond{metav1.ConditionTrue, "Programmed", ""}, cond{metav1.ConditionTrue, "ResolvedRefs", ""}},
		{"certificate reported bad", []gateway.Machine{{Node: "a", ACKed: true, Certificates: map[string]string{"shop": "/etc/osm/gateway-tls/default/shop-cert/tls.crt does not exist"}}},
			cond{metav1.ConditionTrue, "Programmed", ""},
			cond{metav1.ConditionTrue, "Programmed", ""},
			cond{metav1.ConditionFalse, "Invalid", "machine a: /etc/osm/gateway-tls/default/shop-cert/tls.crt does not exist"},
			cond{metav1.ConditionFalse, "InvalidCertificateRef", "machine a: /etc/osm/gateway-tls/default/shop-cert/tls.crt does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := spec.New(t.Context(), discard(), store.NewMemory())
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			srv := httptest.NewServer(NewHandler(discard(), s, Options{GatewayMachines: fixedMachines(tc.machines)}))
			t.Cleanup(srv.Close)
			if code, body := do(t, "POST", srv.URL+"/api/v1/spec/apply", "application/yaml", gw); code != http.StatusOK {
				t.Fatalf("apply: %d %s", code, body)
			}
			code, body := do(t, "GET", srv.URL+"/api/v1/spec/gateways/default/ingress", "", "")
			var g spec.Gateway
			if err := json.Unmarshal([]byte(body), &g); code != http.StatusOK || err != nil || g.Status == nil {
				t.Fatalf("GET the Gateway: %d %v %s", code, err, body)
			}
			st := g.Status
			code, body = do(t, "GET", srv.URL+"/api/v1/spec/gateways", "", "")
			var list struct{ Items []spec.Gateway }
			if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.Items) != 1 || !reflect.DeepEqual(list.Items[0].Status, st) {
				t.Errorf("the list's Gateway status differs from GET's: %d %v %s", code, err, body)
			}
			check := func(what string, cs []metav1.Condition, typ string, want cond) {
				t.Helper()
				for _, c := range cs {
					if c.Type == typ {
						if c.Status != want.status || c.Reason != want.reason || !strings.Contains(c.Message, want.msg) {
							t.Errorf("%s %s = %s %s %q, want %s %s containing %q", what, typ, c.Status, c.Reason, c.Message, want.status, want.reason, want.msg)
						}
						return
					}
				}
				t.Errorf("%s has no %s condition: %+v", what, typ, cs)
			}
			check("Gateway", st.Conditions, "Programmed", tc.gateway)
			check("Gateway", st.Conditions, "Accepted", cond{metav1.ConditionTrue, "Accepted", ""})
			check("listener web", st.Listeners[0].Conditions, "Programmed", tc.web)
			check("listener shop", st.Listeners[1].Conditions, "Programmed", tc.shop)
			check("listener shop", st.Listeners[1].Conditions, "ResolvedRefs", tc.shopRefs)
		})
	}
}
