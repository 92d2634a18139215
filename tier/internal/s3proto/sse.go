package s3proto

import "fmt"

// Server-side encryption of uploads, as S3's x-amz-server-side-encryption
// header names it.
const (
	SSES3      = "AES256"       // SSE-S3: keys the service manages
	SSEKMS     = "aws:kms"      // SSE-KMS: a KMS key (SSEKMSKeyID, else the account's default)
	SSEKMSDSSE = "aws:kms:dsse" // dual-layer SSE-KMS (AWS only)
)

// CheckSSE validates a provider's SSE settings: mode "" (the bucket's
// default encryption), SSES3 or SSEKMS (or SSEKMSDSSE where dsse); a KMS
// key id needs a KMS mode.
func CheckSSE(provider, mode, kmsKeyID string, dsse bool) error {
	switch mode {
	case "", SSES3, SSEKMS:
	case SSEKMSDSSE:
		if !dsse {
			return fmt.Errorf("%s: server-side encryption %q is not supported (want %s or %s)", provider, mode, SSES3, SSEKMS)
		}
	default:
		want := SSES3 + " or " + SSEKMS
		if dsse {
			want = SSES3 + ", " + SSEKMS + " or " + SSEKMSDSSE
		}
		return fmt.Errorf("%s: server-side encryption %q: want %s", provider, mode, want)
	}
	if kmsKeyID != "" && mode != SSEKMS && mode != SSEKMSDSSE {
		return fmt.Errorf("%s: a KMS key id needs server-side encryption %s", provider, SSEKMS)
	}
	return nil
}
