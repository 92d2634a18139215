package msgprop

import (
	"strconv"
	"testing"
)

func TestMsgpropEditAndRead(t *testing.T) {
	java := "TAGS\x01a\x02KEYS\x01k1 k2" // Java: no separator after the last pair
	f := func(props, key, want string, ok bool) {
		t.Helper()
		if v, found := Value(props, key); v != want || found != ok {
			t.Errorf("Value(%q, %q) = %q, %v; want %q, %v", props, key, v, found, want, ok)
		}
	}
	f(java, Tags, "a", true)
	f(java, Keys, "k1 k2", true)
	f(java, UniqKey, "", false)
	f("", Tags, "", false)

	with := With(java, RealTopic, "T")
	if with != "TAGS\x01a\x02KEYS\x01k1 k2\x02REAL_TOPIC\x01T\x02" {
		t.Errorf("With appends: %q", with)
	}
	if got := With(with, Tags, "b"); got != "KEYS\x01k1 k2\x02REAL_TOPIC\x01T\x02TAGS\x01b\x02" {
		t.Errorf("With replaces: %q", got)
	}
	if got := Without(with, Tags, RealTopic); got != "KEYS\x01k1 k2\x02" {
		t.Errorf("Without: %q", got)
	}
	m := Parse(with)
	if len(m) != 3 || m[Tags] != "a" || m[RealTopic] != "T" {
		t.Errorf("Parse: %v", m)
	}
	if back := Parse(Encode(m)); len(back) != 3 || back[Keys] != "k1 k2" {
		t.Errorf("Encode round trip: %v", back)
	}
}

// TestMsgpropSetInt: SetInt is Set with the value's decimal digits, on
// properties with and without the key and a trailing separator, in one
// allocation.
func TestMsgpropSetInt(t *testing.T) {
	const sep, nv = string(PropertySep), string(NameValueSep)
	for _, props := range []string{"", "A" + nv + "1", "A" + nv + "1" + sep, "K" + nv + "old" + sep + "A" + nv + "1" + sep} {
		for _, v := range []int64{0, -7, 1 << 62} {
			want := Set(props, "K", strconv.FormatInt(v, 10))
			if got := SetInt(props, "K", v); got != want {
				t.Fatalf("SetInt(%q, K, %d) = %q, want %q", props, v, got, want)
			}
			if n, ok := Value(want, "K"); !ok || n != strconv.FormatInt(v, 10) {
				t.Fatalf("Set(%q): K = %q %v", props, n, ok)
			}
		}
	}
	props := "A" + nv + "1" + sep
	if n := testing.AllocsPerRun(100, func() { _ = SetInt(props, "K", 1700000000000) }); n != 1 {
		t.Fatalf("SetInt allocates %v times, want 1", n)
	}
}

// TestMsgpropRemove: Remove drops every pair of the keys (empty pairs
// too), keeps the rest in order with a trailing separator, returns props
// itself when no key is there, and allocates once otherwise.
func TestMsgpropRemove(t *testing.T) {
	const sep, nv = string(PropertySep), string(NameValueSep)
	for _, tc := range []struct{ props, want string }{
		{"A" + nv + "1" + sep + "D" + nv + "2" + sep + "B" + nv + "3", "A" + nv + "1" + sep + "B" + nv + "3" + sep},
		{"D" + nv + "2", ""},
		{sep + "D" + nv + "2" + sep + sep + "A" + nv + "1" + sep + "E" + nv, "A" + nv + "1" + sep},
		{"A" + nv + "1" + sep, "A" + nv + "1" + sep},
		{"", ""},
	} {
		if got := Remove(tc.props, "D", "E"); got != tc.want {
			t.Errorf("Remove(%q, D, E) = %q, want %q", tc.props, got, tc.want)
		}
	}
	props := "A" + nv + "1" + sep + "DELAY" + nv + "3" + sep + "UNIQ_KEY" + nv + "X" + sep
	if n := testing.AllocsPerRun(100, func() { _ = Remove(props, "DELAY", "__STARTDELIVERTIME") }); n != 1 {
		t.Fatalf("Remove allocates %v times, want 1", n)
	}
}
