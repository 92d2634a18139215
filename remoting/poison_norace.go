//go:build !race

package remoting

// poisonRecycled: see poison_race.go.
const poisonRecycled = false
