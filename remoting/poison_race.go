//go:build race

package remoting

// poisonRecycled: under the race detector (every test pass that runs the
// broker's paths) a recycled request header is overwritten at once, so a
// string some handler kept from it reads as garbage in the tests instead
// of as a later request's plausible bytes.
const poisonRecycled = true
