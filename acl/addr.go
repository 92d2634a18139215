package acl

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// addrSet is one whiteRemoteAddress (or one globalWhiteRemoteAddresses
// entry) in RocketMQ's notation. It matches an IPv4 address octet by
// octet, or an IPv6 address exactly:
//
//   - or  *.*.*.*          every address (IPv6 included)
//     192.168.0.1             one address (IPv6 too: fe80::1)
//     192.168.0.*             the last octet any value
//     192.168.*.*             (RocketMQ: once an octet is * or a range, those after it must be *)
//     192.168.1.1-100         a range of the last octet (any octet may be a range)
//     192.168.1.{1,5,9}       a set of last octets
//     10.0.0.1,10.0.0.2       a comma list of any of the above
type addrSet struct {
	all  bool
	v4   []octetPattern
	v6   []netip.Addr
	text string // as written, for errors
}

// octetPattern matches an IPv4 address: lo[i] <= octet i <= hi[i], or,
// when set is non-nil for the last octet, octet 3 in set.
type octetPattern struct {
	lo, hi [4]byte
	set    map[byte]bool
}

func parseAddrSet(s string) (addrSet, error) {
	s = strings.TrimSpace(s)
	out := addrSet{text: s}
	if s == "" {
		return out, nil
	}
	// A {a,b} set holds commas of its own: split the list outside braces.
	for _, item := range splitOutsideBraces(s) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if item == "*" || item == "*.*.*.*" || item == "*:*:*:*:*:*:*:*" {
			out.all = true
			continue
		}
		if strings.Contains(item, ":") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return out, fmt.Errorf("address %q: %v (IPv6 addresses are matched exactly)", item, err)
			}
			out.v6 = append(out.v6, a.Unmap())
			continue
		}
		p, err := parseV4Pattern(item)
		if err != nil {
			return out, err
		}
		out.v4 = append(out.v4, p)
	}
	return out, nil
}

func splitOutsideBraces(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseV4Pattern(item string) (octetPattern, error) {
	var p octetPattern
	parts := strings.Split(item, ".")
	if len(parts) != 4 {
		return p, fmt.Errorf("address %q: want four dot-separated octets (192.168.0.1, 192.168.0.*, 192.168.1.1-100, 192.168.1.{1,2})", item)
	}
	wild := false // an octet before was * or a range: RocketMQ wants * after it
	for i, part := range parts {
		part = strings.TrimSpace(part)
		switch {
		case part == "*":
			p.lo[i], p.hi[i] = 0, 255
			wild = true
		case i == 3 && strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}"):
			p.set = map[byte]bool{}
			for _, v := range strings.Split(part[1:len(part)-1], ",") {
				n, err := octet(strings.TrimSpace(v))
				if err != nil {
					return p, fmt.Errorf("address %q: %v", item, err)
				}
				p.set[n] = true
			}
		case wild:
			return p, fmt.Errorf("address %q: after a * or a range every octet must be *", item)
		case strings.Contains(part, "-"):
			lo, hi, _ := strings.Cut(part, "-")
			a, err := octet(lo)
			if err != nil {
				return p, fmt.Errorf("address %q: %v", item, err)
			}
			b, err := octet(hi)
			if err != nil {
				return p, fmt.Errorf("address %q: %v", item, err)
			}
			if a > b {
				return p, fmt.Errorf("address %q: range %d-%d is empty", item, a, b)
			}
			p.lo[i], p.hi[i] = a, b
			wild = true
		default:
			n, err := octet(part)
			if err != nil {
				return p, fmt.Errorf("address %q: %v", item, err)
			}
			p.lo[i], p.hi[i] = n, n
		}
	}
	return p, nil
}

func octet(s string) (byte, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return 0, fmt.Errorf("octet %q: want 0-255", s)
	}
	return byte(n), nil
}

// match reports whether ip (the peer's address) is in the set. An empty
// set matches nothing.
func (s *addrSet) match(ip netip.Addr) bool {
	if s.all {
		return true
	}
	if !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	if ip.Is4() {
		b := ip.As4()
		for i := range s.v4 {
			if s.v4[i].match(b) {
				return true
			}
		}
		return false
	}
	for _, a := range s.v6 {
		if a == ip.WithZone("") {
			return true
		}
	}
	return false
}

func (p *octetPattern) match(b [4]byte) bool {
	for i := range 4 {
		if i == 3 && p.set != nil {
			return p.set[b[3]]
		}
		if b[i] < p.lo[i] || b[i] > p.hi[i] {
			return false
		}
	}
	return true
}

func (s *addrSet) empty() bool { return !s.all && len(s.v4) == 0 && len(s.v6) == 0 }
