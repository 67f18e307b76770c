// Package actors holds what every actor of the tree shares: the environment
// an App hands down (logger, goroutine accounting, backoff) and small helpers.
// The actors themselves live in the sub-packages, one per kind of node.
package actors
