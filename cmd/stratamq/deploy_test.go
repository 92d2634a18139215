package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployFiles (issue 13 item 5): what can be checked without a Docker
// engine. The compose file and the Kubernetes manifests parse, hold what
// they promise (the services; a name server, a broker StatefulSet), every
// STRATAMQ_ variable they, the systemd unit and the Dockerfile set is a
// setting the binary reads (a typo would be ignored silently at run time),
// the image runs as non-root with a /data volume, and the binary builds
// static (CGO_ENABLED=0).
func TestDeployFiles(t *testing.T) {
	t.Parallel()
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("../..", p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(read("infra/deploy/compose.yaml"), &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if _, ok := compose.Services["minio"]; !ok || compose.Services["stratamq"].Environment["STRATAMQ_BUCKET"] == "" {
		t.Fatalf("compose.yaml: services %v, want minio and stratamq with a bucket", compose.Services)
	}
	kinds := map[string]int{}
	dec := yaml.NewDecoder(bytes.NewReader(read("infra/deploy/kubernetes.yaml")))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kubernetes.yaml: %v", err)
		}
		kinds[doc.Kind]++
	}
	if kinds["StatefulSet"] != 1 || kinds["Deployment"] != 1 || kinds["Service"] != 2 {
		t.Fatalf("kubernetes.yaml kinds %v", kinds)
	}

	known := map[string]bool{}
	for _, s := range allSettings() {
		known["STRATAMQ_"+s.Env] = true
	}
	names := regexp.MustCompile(`STRATAMQ_[A-Z0-9_]+`)
	for _, f := range []string{"infra/deploy/compose.yaml", "infra/deploy/kubernetes.yaml", "infra/deploy/stratamq.service", "Dockerfile"} {
		for _, n := range names.FindAllString(string(read(f)), -1) {
			if !known[n] {
				t.Errorf("%s sets %s, which no command reads", f, n)
			}
		}
	}
	docker := string(read("Dockerfile"))
	for _, want := range []string{"USER 65532", "VOLUME /data", "CGO_ENABLED=0", "STRATAMQ_ADVERTISE_ADDR", "EXPOSE 9876 10911"} {
		if !strings.Contains(docker, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if ign := string(read(".dockerignore")); !strings.Contains(ign, "\ndata\n") && !strings.HasPrefix(ign, "data\n") {
		t.Errorf(".dockerignore does not keep ./data out of the image:\n%s", ign)
	}

	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "stratamq"), "./cmd/stratamq")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
}
