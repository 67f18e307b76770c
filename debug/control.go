package debug

import (
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/amqpactor/amqpactor"
)

// serveControl pauses or resumes a subscription by name, when the handler
// has WithControl and the request passes the cross-site guard.
func serveControl(w http.ResponseWriter, r *http.Request, app *amqpactor.App, on bool) {
	if !on {
		http.Error(w, "amqpactor debug: control is off (debug.WithControl)", http.StatusForbidden)
		return
	}
	if r.Header.Get(ControlHeader) == "" {
		http.Error(w, "amqpactor debug: a control request needs the "+ControlHeader+" header", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "amqpactor debug: a control request must come from the debug page's own origin", http.StatusForbidden)
		return
	}
	name, action := r.PathValue("name"), r.PathValue("action")
	if action != "pause" && action != "resume" {
		http.Error(w, "amqpactor debug: no action "+action+" (pause, resume)", http.StatusNotFound)
		return
	}
	s := app.Subscription(name)
	if s == nil {
		http.Error(w, "amqpactor debug: no subscription named "+name, http.StatusNotFound)
		return
	}
	if action == "pause" {
		s.Pause()
	} else {
		s.Resume()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"subscription": name, "paused": action == "pause"})
}

// sameOrigin accepts a request whose browser says it comes from the page's
// own origin, or that says nothing of where it comes from (not a browser).
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}
