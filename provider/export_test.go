package provider

// What the package's external tests (package provider_test) use of its
// internals.
var (
	ListAllChunk = listAllChunk
	TestLog      = testLog
)
