package amqpwire

import (
	"fmt"
	"io"
	"strings"
)

// Format prints c as fmt would, every URL without its password: without
// it %v and %#v of a Config, or of a connector holding one, show the
// password whole.
func (c Config) Format(f fmt.State, verb rune) {
	type config Config // no methods: fmt prints its fields
	s := fmt.Sprintf(fmt.FormatString(f, verb), config(c.redacted()))
	_, _ = io.WriteString(f, strings.ReplaceAll(s, "amqpwire.config{", "amqpwire.Config{"))
}

// Format prints the connector as its String for every verb but %#v, which
// shows its Config, redacted.
func (c *connector) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "&amqpwire.connector{cfg:%#v}", c.cfg)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), c.String())
}

// redacted is c with every URL's password replaced by xxxxx.
func (c Config) redacted() Config {
	c.URL = redactURL(c.URL)
	if c.Failover != nil {
		f := make([]string, len(c.Failover))
		for i, u := range c.Failover {
			f[i] = redactURL(u)
		}
		c.Failover = f
	}
	return c
}
