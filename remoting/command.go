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
