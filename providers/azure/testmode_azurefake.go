//go:build azurefake

package main

import "github.com/osm-vm/osm-vm/providers/azure/internal/fakearm"

// buildFixtureOpener returns the test mode's fixture opener: this is a
// test build (-tags azurefake), whose testFixture config key makes the
// Azure SDK's fake servers answer from a JSON file instead of ARM.
func buildFixtureOpener() fixtureOpener { return fakearm.Open }
