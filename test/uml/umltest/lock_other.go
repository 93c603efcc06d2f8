//go:build !unix

package umltest

// lockMachine is a no-op where there is no UML to run.
func lockMachine() (unlock func(), err error) { return func() {}, nil }
