package amqpwire

import "fmt"

// Format prints the connector as its String for every verb but %#v, which
// shows its Config, redacted.
func (c *connector) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "&amqpwire.connector{cfg:%#v}", c.cfg)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), c.String())
}
