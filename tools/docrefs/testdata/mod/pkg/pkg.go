package pkg

import "sync"

// T is a type with a field and a method.
type T struct {
	F  int
	mu sync.Mutex
}

// M is T's method.
func (*T) M() {}

// Open embeds a type, so its members are not all known here.
type Open struct{ sync.Mutex }

// Top is a function.
func Top() {}

// V is a variable.
var V T
