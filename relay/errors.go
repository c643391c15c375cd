package relay

import "errors"

// Errors of the relay. Nothing is changed when one of the bad-input errors
// is returned.
var (
	// ErrInvalidOptions: New was given Options that cannot work; the
	// message lists every bad field.
	ErrInvalidOptions = errors.New("oncekv: relay: invalid options")
	// ErrNilArgument: New was given a nil queue or send function.
	ErrNilArgument = errors.New("oncekv: relay: nil argument")
	// ErrRunning: Run was called while an earlier Run of the same Relay
	// had not returned; two would count into one set of stats.
	ErrRunning = errors.New("oncekv: relay: already running")
	// ErrInvalidSender: HTTPSender was given a method, URL or header that cannot
	// make a request.
	ErrInvalidSender = errors.New("oncekv: relay: invalid HTTP sender")
	// ErrInvalidKey: a message key that cannot travel in an HTTP header
	// as it is (a control character, spaces at its ends). HTTPSender returns it wrapped as permanent,
	// so the message is dead-lettered instead of retried forever.
	ErrInvalidKey = errors.New("oncekv: relay: key not valid in an HTTP header")
	// ErrRedirect: the far side redirected the request with a 301, 302
	// or 303, which net/http's client follows as a GET without the body,
	// so the far side would never see the message. HTTPSender returns it
	// wrapped as permanent (dead letter, for a redrive once the URL is
	// fixed) instead of taking the answer to the GET for a delivery.
	ErrRedirect = errors.New("oncekv: relay: redirect would drop the request's body")
)
