// Package testwait holds waits that the tests of several tier packages
// share. It is imported only by tests.
package testwait
