package testwait

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Canceled waits up to d for the result a goroutine sends on errc after
// its context was cancelled. It returns nil if that result matches
// context.Canceled, else an error saying what happened instead (another
// result, or none within d), for the caller to report.
func Canceled(errc <-chan error, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("returned %v, want context.Canceled", err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("did not return within %v of cancel", d)
	}
}
