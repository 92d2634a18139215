// Package s3 is a tier.Bucket on Amazon S3 or any S3-compatible server,
// through aws-sdk-go-v2.
//
// Credentials come from the AWS default chain (environment, shared config
// and credentials files, web identity / IRSA, ECS, EC2 IMDS) unless Config
// sets static keys. They are never logged; Config.String redacts them.
//
// Objects up to Config.PartSize bytes are one PutObject; larger ones are a
// multipart upload of PartSize parts that is aborted on any failure, so a
// failed Put leaves nothing visible. With the default 128 MiB parts a GiB
// costs 8 PUT requests (plus one POST to create and one to complete each
// multipart upload). When the reader is an io.ReaderAt and io.Seeker (an
// *os.File, a *bytes.Reader), parts are read in place and Concurrency of
// them are uploaded in parallel; any other reader is buffered one part at a
// time.
//
// Checksums: request checksums are sent and response checksums validated
// only when the operation requires it (WhenRequired). The SDK's defaults
// break ranged GETs against some S3-compatible servers, and the payload is
// SHA-256 signed anyway on plain HTTP.
package s3
