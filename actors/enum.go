package actors

// EnumName is names[v], or "invalid" past their end: the String of the
// small enumerations of the actor packages (a link's events).
func EnumName[T ~uint8](names []string, v T) string {
	if int(v) < len(names) {
		return names[v]
	}
	return "invalid"
}

// OnRestart is where protoactor's Restarting takes a link actor in state s:
// to restarting, but a stopped actor stays stopped (protoactor restarts even
// an actor that stopped meanwhile, for a failure decided after its Stop).
// False when s is restarting already.
func OnRestart[S comparable](s, restarting, stopped S) (S, bool) {
	switch s {
	case stopped:
		return s, true
	case restarting:
		return s, false
	}
	return restarting, true
}

// OnStop is where Stopped takes a link actor in state s; false when it had
// stopped already.
func OnStop[S comparable](s, stopped S) (S, bool) { return stopped, s != stopped }
