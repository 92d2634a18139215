package remoting

// DecodeFramePairs is DecodeFrame without the ExtFields map: a JSON
// header's extFields stay as decoded pairs, read with Command.Ext (or
// turned into the map on demand by ExtMap). For callers that read one or
// two fields of many frames, such as a load generator reading acks.
func DecodeFramePairs(frame []byte) (*Command, error) { return decodeFrame(frame) }
