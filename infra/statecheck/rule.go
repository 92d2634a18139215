package statecheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Rule says who may touch the fields of one struct type (see the package
// doc for the rule in words).
type Rule struct {
	Type string // the struct, e.g. "Broker"
	// Constructor is the function whose writes are construction ("New"):
	// a field written nowhere else is wiring.
	Constructor string
	// Lifecycle are the files that build, run and stop the value
	// (broker.go, run.go): they may write and read every field.
	Lifecycle []string
	// Owners names, for every state field (one written outside
	// Constructor), the one file that owns it.
	Owners map[string]string
	// Settings are the field types any file may select into (plain
	// values set at construction: Config, TLS).
	Settings []string
	// Allow are the uses the rule would refuse that stay, each with its
	// reason.
	Allow []Allowed
}

// Allowed is an exception: any use of Field in File.
type Allowed struct{ File, Field, Reason string }

// Violation is a use the rule refuses.
type Violation struct {
	Access
	Why string
}

func (v Violation) String() string { return v.Access.String() + ": " + v.Why }

// Report is Check's answer.
type Report struct {
	// State is each state field's writers outside the constructor
	// (file names, sorted).
	State map[string][]string
	// Violations are the refused uses not allowed; Allowed those an Allow
	// entry let through.
	Violations, Allowed []Violation
	// Problems are mistakes in the rule itself: a state field without an
	// owner, an owner entry for a field that is not state, an Allow entry
	// no use needs.
	Problems []string
	Uses     int // of r.Type's fields
}

// Check judges p's uses of r.Type's fields by r.
func Check(p *Package, r Rule) Report {
	rep := Report{State: map[string][]string{}}
	var acc []Access
	for _, a := range p.Accesses {
		if a.Type != r.Type {
			continue
		}
		acc = append(acc, a)
		rep.Uses++
		if a.Write && a.Func != r.Constructor && !slices.Contains(rep.State[a.Field], a.File) {
			rep.State[a.Field] = append(rep.State[a.Field], a.File)
			sort.Strings(rep.State[a.Field])
		}
	}
	for f, files := range rep.State {
		if r.Owners[f] == "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s.%s is written after %s (in %s): name its owner file", r.Type, f, r.Constructor, strings.Join(files, ", ")))
		}
	}
	for f := range r.Owners {
		if rep.State[f] == nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s.%s has an owner but is written only by %s: it is wiring, drop the entry", r.Type, f, r.Constructor))
		}
	}
	used := make([]bool, len(r.Allow))
	for _, a := range acc {
		why := ""
		owner := r.Owners[a.Field]
		if owner == "" {
			owner = "no file (name its owner)"
		}
		switch {
		case slices.Contains(r.Lifecycle, a.File):
		case rep.State[a.Field] != nil && a.File != owner && a.Write:
			why = fmt.Sprintf("writes state %s owns", owner)
		case rep.State[a.Field] != nil && a.File != owner:
			why = fmt.Sprintf("reads state %s owns (call a method %s declares)", owner, owner)
		case a.Sub != "" && a.File != a.FieldTypeFile && !slices.Contains(r.Settings, a.FieldType):
			why = fmt.Sprintf("selects into a %s, whose fields are %s's (call its methods)", a.FieldType, a.FieldTypeFile)
		}
		if why == "" {
			continue
		}
		v := Violation{a, why}
		if i := slices.IndexFunc(r.Allow, func(al Allowed) bool { return al.File == a.File && al.Field == a.Field }); i >= 0 {
			used[i] = true
			rep.Allowed = append(rep.Allowed, v)
			continue
		}
		rep.Violations = append(rep.Violations, v)
	}
	for i, u := range used {
		if !u {
			rep.Problems = append(rep.Problems, fmt.Sprintf("allowed %s in %s is not needed any more: drop the entry", r.Allow[i].Field, r.Allow[i].File))
		}
	}
	sort.Strings(rep.Problems)
	return rep
}
