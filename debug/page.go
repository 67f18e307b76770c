package debug

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
)

// page is the live page: one file, its style and script inline, so the
// handler needs nothing from outside and nothing is built.
//
//go:embed page.html
var page []byte

// pagePolicy lets the page run its own inline style and script (by their
// hashes) and talk only to the handler: nothing else loads, and no other
// site can frame it.
var pagePolicy = "default-src 'none'; " +
	"style-src " + inlineHash(page, "<style>", "</style>") + "; " +
	"script-src " + inlineHash(page, "<script>", "</script>") + "; " +
	"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// inlineHash is the CSP source of the one inline element between open and
// close in html.
func inlineHash(html []byte, open, close string) string {
	s := string(html)
	i := strings.Index(s, open)
	j := strings.Index(s, close)
	if i < 0 || j < i {
		panic("amqpactor/debug: page.html has no " + open)
	}
	sum := sha256.Sum256([]byte(s[i+len(open) : j]))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func servePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(page)
}
