package connection

// SetPanicAt makes the connection actor call f at each of its fault points
// (see panicAt) until restore is called; f panics to crash it there.
func SetPanicAt(f func(point string)) (restore func()) {
	panicAt.Store(&f)
	return func() { panicAt.Store(nil) }
}
