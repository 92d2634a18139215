package broker

import (
	"errors"
	"fmt"
)

// persistAdopted writes what adoptCheckpointMetadata added to a promoted
// slave's tables (topics, subscription groups and consumer offsets its
// followed copy lacked and the bucket checkpoint lists) to its config dir
// before the broker serves or registers (issue 29 item 13). Otherwise
// they live in memory only until the periodic config flush (5 s): a new
// master killed meanwhile restarts on its disk, retakes its own lease and
// reads only its local tables (a master that wrote the prefix last does
// not adopt the checkpoint's), so a topic acknowledged before the failover
// is gone although its messages are stored: not registered, no route,
// and clients holding an empty route say "route info not found" for good.
func (b *Broker) persistAdopted() error {
	if err := errors.Join(b.topics.Save(), b.groups.Save(), b.offsets.Save()); err != nil {
		return fmt.Errorf("broker: saving the topics, groups and offsets adopted from the bucket checkpoint: %w", err)
	}
	return nil
}
