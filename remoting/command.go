package remoting

// SerializeType is the header encoding of a frame: the top byte of the
// header-length word.
type SerializeType byte

const (
	SerializeJSON     SerializeType = 0
	SerializeRocketMQ SerializeType = 1
)

// Flag bits of a command.
const (
	FlagResponse int32 = 1 << 0
	FlagOneway   int32 = 1 << 1
)

// Command is one RemotingCommand: a request or a response.
//
// ExtFields values are always strings on the wire (client-go cannot decode
// anything else). Body is not copied by the codec: a decoded command's Body
// aliases the frame buffer it came from.
type Command struct {
	Code      int32 // RequestCode for requests, ResponseCode for responses
	Language  string
	Version   int32
	Opaque    int32
	Flag      int32
	Remark    string
	ExtFields map[string]string
	Body      []byte
	// Serialize is how the header was (or will be) encoded. Responses use
	// the request's.
	Serialize SerializeType
	// pooledHdr: the command is the head of a pooled decodedCommandHeader
	// (decodedHeader); recycle, set by ReadBatch.Recycle, lets the server
	// give it back once its batch ends. Both sit in padding: the decoded
	// command and its header copy still fill one size class.
	pooledHdr, recycle bool
	// BodyParts, when set on a command to be written, is sent after Body as
	// further body bytes without copying them (vectored write of log
	// slices). The codec counts them in the frame length.
	BodyParts [][]byte
	// Header, when set on a command to be written, writes its extFields in
	// place of ExtFields (which is then ignored): a typed header encodes
	// without building a map or a string per value. Decoding never sets it.
	Header ExtAppender

	// sendSlots, set by the JSON decoder: nibble n (bits 4n..4n+3) of the
	// first 16 pairs is 1 + the sendKeys slot of ext[n]'s key, or 0 when
	// the decoder did not match it as a long send key. DecodeCommand then
	// takes those values without looking their keys up.
	sendSlots uint64
	// ext holds the decoded extFields in wire order. Keys and values are
	// substrings of one copy of the header, never of the frame buffer.
	ext []ExtField
	// frame is the pooled buffer that Body aliases, when the server may
	// recycle it after the handler returns (see RequestHinter).
	frame *[]byte
	// charge is what the request's frame took from the server's read
	// budget, given back once it is handled: charge bytes, or, when
	// negative, the overflow slot holding -charge bytes. (One word: the
	// decoded command and its header copy fill a size class exactly.)
	charge int64
}

// ExtField is one extFields entry.
type ExtField struct{ Key, Value string }

// Ext returns the extFields value of key. It reads ExtFields when that map
// is set and the decoded pairs otherwise, so it works on commands decoded
// without the map (see RequestHinter) and on commands built by hand.
func (c *Command) Ext(key string) (string, bool) {
	if c.ExtFields != nil || c.ext == nil {
		v, ok := c.ExtFields[key]
		return v, ok
	}
	for i := range c.ext {
		if c.ext[i].Key == key {
			return c.ext[i].Value, true
		}
	}
	return "", false
}

// ExtMap returns ExtFields, first building it from the decoded pairs when
// the command was decoded without it.
func (c *Command) ExtMap() map[string]string {
	if c.ExtFields == nil && len(c.ext) > 0 {
		m := make(map[string]string, len(c.ext))
		for _, f := range c.ext {
			m[f.Key] = f.Value
		}
		c.ExtFields = m
	}
	return c.ExtFields
}

// IsResponse reports whether the response bit is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the sender asked for no reply (Java sets it;
// client-go never does).
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// Version is the MQVersion ordinal this package puts in the commands it
// creates: V4_9_7 (407). Java clients use it to decide what a server
// supports (≥ 232 means SQL filters are available); client-go only checks
// that it is not zero. A Java name server returns standard route JSON to
// requests with version ≥ 401.
const Version int32 = 407

// LanguageGo is the language this package puts in the commands it creates.
const LanguageGo = "GO"

// NewRequest returns a request command with JSON serialization. ext is used
// as is (not copied).
func NewRequest(code RequestCode, ext map[string]string, body []byte) *Command {
	return &Command{
		Code:      int32(code),
		Language:  LanguageGo,
		Version:   Version,
		ExtFields: ext,
		Body:      body,
	}
}

// NewResponse returns a response to req: same opaque and serialization,
// the response flag set.
func NewResponse(req *Command, code ResponseCode, remark string) *Command {
	return &Command{
		Code:      int32(code),
		Language:  LanguageGo,
		Version:   Version,
		Opaque:    req.Opaque,
		Flag:      FlagResponse,
		Remark:    remark,
		Serialize: req.Serialize,
	}
}

// NotSupported is the answer to a request code a handler does not serve:
// REQUEST_CODE_NOT_SUPPORTED with Java's remark " request type N not
// supported" (the leading space is Java's).
func NotSupported(req *Command) *Command {
	return NewResponse(req, RequestCodeNotSupported, " request type "+itoa(int64(req.Code))+" not supported")
}
