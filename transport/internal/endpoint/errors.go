package endpoint

import "strings"

// ConnectError is what a connector's Connect returns: it names the redacted
// URL, and its text holds no credential.
type ConnectError struct {
	URL string // redacted
	Msg string
	Err error // scrubbed of credentials (Scrub)
	// Permanent: retrying cannot help (credentials refused, a URL or
	// settings that can never work). Reconnect loops stop on it.
	Permanent bool
}

// Terminal reports an error that retrying the same Connect will not cure.
func (e *ConnectError) Terminal() bool { return e.Permanent }

func (e *ConnectError) Error() string {
	s := "amqpactor: connect " + e.URL + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Scrubbed is an error told in other words (its credentials taken out, or
// a client library's text said plainly), the original kept reachable for
// errors.Is and errors.As.
type Scrubbed struct {
	Text string
	Err  error
}

func (e *Scrubbed) Error() string { return e.Text }
func (e *Scrubbed) Unwrap() error { return e.Err }

// Scrub is err with every secret in its text replaced by xxxxx; err itself
// when its text holds none.
func Scrub(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "xxxxx")
		}
	}
	if text == err.Error() {
		return err
	}
	return &Scrubbed{Text: text, Err: err}
}

// Broker is the product and version a broker names in its connection
// properties (AMQP 1.0 open, AMQP 0-9-1 connection.start), as
// "RabbitMQ 4.0.5"; empty when it names neither.
func Broker(props map[string]any) string {
	product, _ := props["product"].(string)
	version, _ := props["version"].(string)
	return strings.TrimSpace(product + " " + version)
}
