package bytesize

import "testing"

func TestParse(t *testing.T) {
	f := func(in string, want Size, wantErr bool) {
		t.Helper()
		got, err := Parse(in)
		if (err != nil) != wantErr {
			t.Fatalf("Parse(%q) err = %v, wantErr %v", in, err, wantErr)
		}
		if !wantErr && got != want {
			t.Fatalf("Parse(%q) = %d, want %d", in, got, want)
		}
	}
	f("64MiB", 64<<20, false)
	f("4mib", 4<<20, false)
	f("1GiB", 1<<30, false)
	f("4MB", 4_000_000, false)
	f("512k", 512<<10, false)
	f("1048576", 1<<20, false)
	f("0", 0, false)
	f("1.5GiB", 3<<29, false)
	f("", 0, true)
	f("lots", 0, true)
	f("-1MiB", 0, true)
	if s := Size(64 << 20).String(); s != "64MiB" {
		t.Fatalf("String = %q", s)
	}
}
