package broker

import (
	"os"
	"strings"
)

// machineBootID is Linux's id of the running boot ("" elsewhere): a data
// dir written in the same boot lost nothing to a process crash.
func machineBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
