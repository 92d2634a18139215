package remoting

// The codec shared by every custom header type but
// SendMessageRequestHeader (which has its own, faster one): a header type
// lists its fields once, in a walk method, and headerWalk runs that list
// to decode or to encode the header.

// fieldRule says what Decode does when a field's key is missing and what
// Encode does when the field holds its zero value.
type fieldRule uint8

const (
	// fieldRequired: Decode fails when the key is missing; Encode always
	// writes the key.
	fieldRequired fieldRule = iota
	// fieldOptional: Decode leaves the zero value when the key is missing;
	// Encode always writes the key.
	fieldOptional
	// fieldOmitEmpty: as fieldOptional, but Encode leaves the key out when
	// the field holds its zero value.
	fieldOmitEmpty
)

// headerWalk is a pass over a header's fields, made by its Decode or
// Encode and handed to its walk method, which calls one of the methods
// below (str, boolean, i32, ...) per field, in the order Decode checks
// them, and returns the walk.
//
// Decode walks once: every field is set from ext. The first missing
// required field or unparsable number is err, and every field after it is
// set to its zero value; but presence (the flag of flaggedI32, a boolPtr
// field being non-nil) is recorded for every field.
//
// Encode walks twice: a first pass counts the keys to write, sized makes
// ext to hold exactly them, and a second pass writes them.
type headerWalk struct {
	encode bool              // an encode walk, not a decode walk
	ext    map[string]string // decode: the input; encode: the output, once sized
	err    error             // decode: the first missing or unparsable field
	n      int               // encode: the keys counted
}

// sized ends the counting pass of an encode walk.
func (w *headerWalk) sized() *headerWalk {
	w.ext = make(map[string]string, w.n)
	return w
}

// str walks the string field *p, whose key is key.
func (w *headerWalk) str(key string, p *string, rule fieldRule) {
	if !w.encode {
		*p, _ = w.read(key, rule)
	} else if w.writes(rule, *p == "") {
		w.ext[key] = *p
	}
}

// boolean walks the bool field *p, read as Java's Boolean.parseBoolean
// reads it.
func (w *headerWalk) boolean(key string, p *bool, rule fieldRule) {
	if !w.encode {
		v, _ := w.read(key, rule)
		*p = parseBool(v)
	} else if w.writes(rule, !*p) {
		w.ext[key] = fmtBool(*p)
	}
}

// i32 walks the int32 field *p.
func (w *headerWalk) i32(key string, p *int32, rule fieldRule) {
	if !w.encode {
		*p = int32(w.int(key, rule, 32))
	} else if w.writes(rule, *p == 0) {
		w.ext[key] = fmtI32(*p)
	}
}

// i64 walks the int64 field *p.
func (w *headerWalk) i64(key string, p *int64, rule fieldRule) {
	if !w.encode {
		*p = w.int(key, rule, 64)
	} else if w.writes(rule, *p == 0) {
		w.ext[key] = fmtI64(*p)
	}
}

// boolPtr walks the optional bool field *p: nil when key is missing, and
// left out of Encode while nil.
func (w *headerWalk) boolPtr(key string, p **bool) {
	if w.encode {
		if w.writes(fieldOmitEmpty, *p == nil) {
			w.ext[key] = fmtBool(**p)
		}
		return
	}
	_, present := w.ext[key]
	v, _ := w.read(key, fieldOptional)
	*p = nil
	if present {
		b := parseBool(v)
		*p = &b
	}
}

// flaggedI32 walks the optional int32 field *p, whose presence is kept
// apart in *set: Decode sets *set to whether key was there, and Encode writes key
// only while *set is true.
func (w *headerWalk) flaggedI32(key string, p *int32, set *bool) {
	if w.encode {
		if w.writes(fieldOmitEmpty, !*set) {
			w.ext[key] = fmtI32(*p)
		}
		return
	}
	_, *set = w.ext[key]
	w.i32(key, p, fieldOptional)
}

// read is the text of key for a decode walk, and whether it was read: ""
// and false when key is missing (an error if rule is fieldRequired) or
// after an earlier error.
func (w *headerWalk) read(key string, rule fieldRule) (string, bool) {
	if w.err != nil {
		return "", false
	}
	v, ok := w.ext[key]
	if !ok && rule == fieldRequired {
		w.err = &HeaderFieldError{Field: key}
	}
	return v, ok
}

// int reads key as a bits-bit integer; a bad number is w's error and 0.
func (w *headerWalk) int(key string, rule fieldRule, bits int) (n int64) {
	if v, ok := w.read(key, rule); ok {
		var err error
		if n, err = parseExtInt(v, bits); err != nil {
			w.err = &HeaderFieldError{Field: key, Value: v, Err: err}
			n = 0
		}
	}
	return n
}

// writes reports whether an encode walk writes a field now: not when
// rule is fieldOmitEmpty and the field holds its zero value (empty), and
// not in the counting pass, which only counts the fields it would write.
func (w *headerWalk) writes(rule fieldRule, empty bool) bool {
	if rule == fieldOmitEmpty && empty {
		return false
	}
	if w.ext == nil {
		w.n++
		return false
	}
	return true
}
