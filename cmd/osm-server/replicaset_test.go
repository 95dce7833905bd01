package main

import (
	"testing"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

func TestAdvertisedReplica(t *testing.T) {
	for _, tt := range []struct {
		name           string
		api, xds       string
		serverNames    []string
		want           meshapi.Replica
		wantAdvertised bool
	}{
		{"specific addresses", "10.0.0.5:15443", "10.0.0.5:15128", nil, meshapi.Replica{API: "https://10.0.0.5:15443", XDS: "10.0.0.5:15128"}, true},
		{"0.0.0.0 and a server name", "0.0.0.0:15443", "0.0.0.0:15128", []string{"osm-1.example.com", "osm"}, meshapi.Replica{API: "https://osm-1.example.com:15443", XDS: "osm-1.example.com:15128"}, true},
		{"IPv6", "[fd00::5]:15443", "[::]:15128", []string{"osm-1"}, meshapi.Replica{API: "https://[fd00::5]:15443", XDS: "osm-1:15128"}, true},
		{"0.0.0.0 without server names", "0.0.0.0:15443", "0.0.0.0:15128", nil, meshapi.Replica{}, false},
		{"port 0", "10.0.0.5:15443", "10.0.0.5:0", nil, meshapi.Replica{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := advertisedReplica(Config{APIAddress: tt.api, XDSAddress: tt.xds, ServerNames: tt.serverNames})
			if got != tt.want || ok != tt.wantAdvertised {
				t.Errorf("advertisedReplica = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantAdvertised)
			}
		})
	}
}
