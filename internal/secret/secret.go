// Package secret holds the strings fmt must never print, such as a broker
// URL with its password.
package secret

// String holds a secret string; call it for the value. fmt prints a func
// as its address whatever the verb and the depth, where a string field of
// a struct prints whole (fmt calls no Format or String method on an
// unexported field, so a redacting method would not be enough).
type String func() string

// New holds s.
func New(s string) String { return func() string { return s } }
