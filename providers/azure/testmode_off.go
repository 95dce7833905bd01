//go:build !azurefake

package main

// buildFixtureOpener returns nil: production builds have no test mode and
// refuse the testFixture config key. Build with -tags azurefake for it.
func buildFixtureOpener() fixtureOpener { return nil }
