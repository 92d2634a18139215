package main

import (
	"flag"
	"fmt"
	"strings"
)

// commandSettings is the settings a command reads (nil: all of them):
// `stratamq namesrv -h` lists only the name server's, `broker -h` all but
// the name server's listen address.
func commandSettings(name string) map[string]bool {
	switch name {
	case "namesrv":
		return setOf("NAMESRV_LISTEN", "HTTP_LISTEN", "LOG_LEVEL", "PPROF", "ACL_FILE",
			"MAX_READ_MEMORY", "MAX_CONNECTIONS", "MAX_CONNECTIONS_PER_IP", "FRAME_TIMEOUT",
			"TLS_MODE", "TLS_CERT", "TLS_KEY", "TLS_CLIENT_CA", "HTTP_TLS")
	case "broker":
		all := map[string]bool{}
		for _, s := range allSettings() {
			all[s.Env] = s.Env != "NAMESRV_LISTEN"
		}
		return all
	}
	return nil
}

// allSettings is every setting of Config, in declaration order.
func allSettings() []setting {
	var c Config
	return bindFlags(flag.NewFlagSet("", flag.ContinueOnError), valueOf(&c), nil)
}

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// printFlagUsage prints a command's settings: flag, variable, help and the
// default as the configuration table gives it (none for a setting whose
// default is computed: its help says how).
func printFlagUsage(fs *flag.FlagSet, name string, settings []setting) {
	w := fs.Output()
	fmt.Fprintf(w, "usage: stratamq %s [flags]\n\nEach flag is also an environment variable; flags win.\n\n", name)
	for _, s := range settings {
		fmt.Fprintf(w, "  --%s  (STRATAMQ_%s)\n", s.Flag, s.Env)
		help := s.Help
		if s.Default != "" {
			help += " [default " + s.Default + "]"
		}
		for _, line := range wrap(help, 76) {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
}

// wrap splits text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, word := range strings.Fields(text) {
		if cur.Len() > 0 && cur.Len()+1+len(word) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}
