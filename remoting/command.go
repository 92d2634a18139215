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
	// BodyParts, when set on a command to be written, is sent after Body as
	// further body bytes without copying them (vectored write of log
	// slices). The codec counts them in the frame length.
	BodyParts [][]byte
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
