package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// URL is a broker URL taken apart and checked.
type URL struct {
	Rest           string // the URL without its userinfo
	Userinfo       string // as written, for scrubbing
	User, Password string // decoded
	HasUser        bool
	TLS            bool   // amqps
	Host           string // without brackets
	Port           string // as given, or 5672 (amqp) or 5671 (amqps)
	Path           string // decoded, with its leading '/'
}

// HostPort is host and port as net.Dial takes them.
func (u URL) HostPort() string { return net.JoinHostPort(u.Host, u.Port) }

// Parse takes raw apart; redacted is raw as RedactURL spells it, the name
// every error gives it.
func Parse(raw, redacted string) (URL, error) {
	if raw == "" {
		return URL{}, &ConnectError{URL: "(empty URL)", Msg: "no broker URL"}
	}
	sp, err := splitUserinfo(raw)
	if err != nil {
		return URL{}, &ConnectError{URL: redacted, Msg: "invalid URL", Err: err}
	}
	u, err := url.Parse(sp.rest)
	if err != nil {
		// *url.Error repeats the whole URL: keep only the reason. The URL
		// parsed here has no userinfo, so the reason cannot quote the
		// password; it is scrubbed anyway.
		var ue *url.Error
		reason := err
		if errors.As(err, &ue) {
			reason = ue.Err
		}
		return URL{}, &ConnectError{URL: redacted, Msg: "invalid URL", Err: Scrub(reason, sp.userinfo, sp.password)}
	}
	if u.User != nil {
		// Only possible without "://", which splitUserinfo leaves alone.
		return URL{}, &ConnectError{URL: redacted, Msg: "invalid URL: want amqp://[user:password@]host[:port][/vhost]"}
	}
	ep := URL{Rest: sp.rest, Path: u.Path}
	if sp.hasUser {
		ep.HasUser, ep.Userinfo = true, sp.userinfo
		ep.User, ep.Password = sp.user, sp.password
	}
	switch u.Scheme {
	case "amqp":
		ep.Port = "5672"
	case "amqps":
		ep.TLS = true
		ep.Port = "5671"
	default:
		return URL{}, &ConnectError{URL: redacted, Msg: fmt.Sprintf("unsupported scheme %q (want amqp or amqps)", u.Scheme)}
	}
	ep.Host = u.Hostname()
	if ep.Host == "" {
		return URL{}, &ConnectError{URL: redacted, Msg: "URL has no host"}
	}
	if p := u.Port(); p != "" {
		ep.Port = p
	}
	return ep, nil
}

// isLoopback reports whether host is a loopback address or "localhost". A
// name other than localhost is never resolved here, so it counts as remote.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// userinfoSplit is a URL with its userinfo taken off.
type userinfoSplit struct {
	rest           string // the URL without userinfo
	userinfo       string // as written
	user, password string // decoded
	hasUser        bool
}

// splitUserinfo takes the userinfo off a scheme://userinfo@host... URL by
// hand: the userinfo ends at the last '@'. url.Parse ends the authority at
// the first '/', '?' or '#', so a password holding one of them was misread
// (as a host and port, a path, a query or a fragment: "user:1234/x@host"
// dialled host "user", port 1234) and quoted in errors and in the
// "redacted" URL; a '%' not followed by two hex digits made it fail with an
// error quoting the password. Here user and password are percent-decoded
// when every '%' in them starts an escape, and taken as written otherwise.
// Errors never quote any of it. A URL without "://" is returned whole,
// unless it holds an '@' (it would be "user:password@host").
func splitUserinfo(raw string) (userinfoSplit, error) {
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok || !validScheme(scheme) {
		if strings.Contains(raw, "@") {
			return userinfoSplit{}, errors.New("no scheme: want amqp://[user:password@]host[:port][/vhost]")
		}
		return userinfoSplit{rest: raw}, nil
	}
	at := strings.LastIndex(after, "@")
	if at < 0 {
		return userinfoSplit{rest: raw}, nil
	}
	sp := userinfoSplit{rest: scheme + "://" + after[at+1:], userinfo: after[:at], hasUser: true}
	for i := 0; i < len(sp.userinfo); i++ {
		if b := sp.userinfo[i]; b < 0x20 || b == 0x7f {
			return userinfoSplit{}, errors.New("the userinfo holds a control character")
		}
	}
	user, pass, _ := strings.Cut(sp.userinfo, ":")
	sp.user, sp.password = unescapeOrAsIs(user), unescapeOrAsIs(pass)
	return sp, nil
}

// validScheme reports a URL scheme: a letter, then letters, digits, '+',
// '-' or '.'.
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func unescapeOrAsIs(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// RedactURL spells raw as url.URL.Redacted does, the password (whatever
// its characters) replaced by xxxxx. A URL that does not parse is cut down
// to its scheme and host part, so that not even a malformed URL leaks a
// password.
func RedactURL(raw string) string {
	sp, err := splitUserinfo(raw)
	if err != nil {
		// No scheme, or a userinfo that cannot be used: keep only what
		// follows the last '@' (and the scheme, when there is one).
		prefix := ""
		if scheme, _, ok := strings.Cut(raw, "://"); ok && validScheme(scheme) {
			prefix = scheme + "://"
		}
		return prefix + "xxxxx@" + raw[strings.LastIndex(raw, "@")+1:]
	}
	if !sp.hasUser {
		if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
			return u.Redacted()
		}
		return raw
	}
	scheme, host, _ := strings.Cut(sp.rest, "://")
	if u, err := url.Parse(sp.rest); err == nil {
		host = strings.TrimPrefix(u.String(), u.Scheme+"://")
	}
	user := url.User(sp.user).String()
	if _, _, hasPass := strings.Cut(sp.userinfo, ":"); hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + "@" + host
}
