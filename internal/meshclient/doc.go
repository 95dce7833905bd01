// Package meshclient is the client side of osm-server's HTTPS API: the
// enrollment and renewal client osm-agent uses ([Enroll], [Renew]), the
// agent-config poll ([FetchAgentConfig]), and [Admin], the one admin API
// client every osm-server CLI subcommand uses. It is the one place that
// pins the server by --ca-cert-hash, sets the Authorization header and
// turns an [meshapi.ErrorBody] into an [*APIError].
//
// It imports internal/meshapi and internal/mesh of osm-vm and never a
// server package (internal/enroll, internal/store, internal/certificate,
// internal/spec, internal/api): osm-agent links it, and deps_test.go
// enforces that.
package meshclient
