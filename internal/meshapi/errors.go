package meshapi

// ErrorBody is the JSON body of every error response of the HTTPS API.
type ErrorBody struct {
	// Reason is one of the Reason constants; empty on routes that give
	// none.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error"`
	// Errors lists every problem of an invalid mesh specification batch
	// (Reason Invalid).
	Errors []FieldError `json:"errors,omitempty"`
}

// Reasons of error responses.
const (
	ReasonBadRequest          = "BadRequest"                // 400
	ReasonInvalid             = "Invalid"                   // 400, with Errors
	ReasonWeakKey             = "WeakKey"                   // 400
	ReasonTokenUnknown        = "TokenUnknown"              // 401
	ReasonTokenExpired        = "TokenExpired"              // 401
	ReasonTokenRevoked        = "TokenRevoked"              // 401
	ReasonTokenUsedUp         = "TokenUsedUp"               // 401
	ReasonServiceMismatch     = "ServiceMismatch"           // 403
	ReasonClientCertRequired  = "ClientCertificateRequired" // 401
	ReasonCertificateExpired  = "CertificateExpired"        // 401
	ReasonNotProxyCertificate = "NotProxyCertificate"       // 401
	ReasonRefused             = "Refused"                   // 403
	ReasonRenewalTooEarly     = "RenewalTooEarly"           // 429, Retry-After
	ReasonRenewalNotCurrent   = "RenewalNotCurrent"         // 403: renew with the current certificate
	ReasonConflict            = "Conflict"                  // 409 (spec) or 503, retry (enroll)
	ReasonNotFound            = "NotFound"                  // 404
	ReasonInternal            = "Internal"                  // 500
)

// FieldError is one problem of a mesh specification document.
type FieldError struct {
	// Document names the document: kind, namespace/name and position.
	Document string `json:"document"`
	// Field is the field path, such as spec.ports[0].port; empty for the
	// whole document.
	Field string `json:"field,omitempty"`
	// Message says what is wrong and how to fix it.
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Document + ": " + e.Message
	}
	return e.Document + ": " + e.Field + ": " + e.Message
}
