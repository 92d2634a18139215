package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// runAdminCmd runs `stratamq admin args...` in-process with environ and
// returns its exit code, stdout and stderr.
func runAdminCmd(environ map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"admin"}, args...), environ, &out, &errOut)
	return code, out.String(), errOut.String()
}

// `stratamq admin haStatus` against a running master and its slave: by -b,
// by -n (the brokers of the name server's cluster info, master then
// slave), --json; GET /ha answers the same status; usage errors exit 2.
func TestAdminHAStatus(t *testing.T) {
	haAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	m := startServe(t, dir, map[string]string{"STRATAMQ_HA_LISTEN": haAddr, "STRATAMQ_HTTP_LISTEN": httpAddr})

	slaveAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	slaveDone := make(chan int, 1)
	slaveLogs := &syncBuffer{}
	go func() {
		slaveDone <- run(ctx, []string{"broker"}, map[string]string{
			"STRATAMQ_ROLE": "slave", "STRATAMQ_BROKER_ID": "1", "STRATAMQ_HA_MASTER": haAddr,
			"STRATAMQ_NAMESRV": m.nsAddr, "STRATAMQ_LISTEN": slaveAddr, "STRATAMQ_DATA_DIR": t.TempDir(),
			"STRATAMQ_BUCKET": "file://" + dir + "/bucket", "STRATAMQ_HTTP_LISTEN": fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		}, io.Discard, slaveLogs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-slaveDone:
			if code != 0 {
				t.Errorf("slave exited with %d:\n%s", code, slaveLogs.String())
			}
		case <-time.After(40 * time.Second):
			t.Errorf("slave did not stop:\n%s", slaveLogs.String())
		}
	})

	env := map[string]string{}
	var out string
	waitFor(t, 20*time.Second, "haStatus -b to list the slave", func() bool {
		code, o, _ := runAdminCmd(env, "haStatus", "-b", m.brokAddr)
		out = o
		return code == 0 && strings.Contains(o, "\n  slave 127.0.0.1:")
	})
	wantMaster := fmt.Sprintf("broker-a (DefaultCluster) %s: async_master, brokerId 0, epoch ", m.brokAddr)
	if !strings.HasPrefix(out, wantMaster) || !strings.Contains(out, "HA listen "+haAddr) ||
		!strings.Contains(out, "(broker-a): acked ") || !strings.Contains(out, "in sync") {
		t.Fatalf("haStatus -b master:\n%s", out)
	}

	waitFor(t, 20*time.Second, "the slave registered as brokerId 1", func() bool {
		code, o, _ := runAdminCmd(env, "haStatus", "-n", m.nsAddr)
		out = o
		return code == 0 && strings.Contains(o, slaveAddr+": slave, brokerId 1")
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], wantMaster) || !strings.HasPrefix(lines[1], "  slave ") ||
		!strings.Contains(lines[2], slaveAddr+": slave, brokerId 1") ||
		!strings.HasPrefix(lines[3], fmt.Sprintf("  master %s (broker %s): connected, master end ", haAddr, m.brokAddr)) {
		t.Fatalf("haStatus -n (master, its slave, the slave, its master):\n%s", out)
	}
	// NAMESRV_ADDR stands for -n, as for mqadmin.
	if code, o, e := runAdminCmd(map[string]string{"NAMESRV_ADDR": m.nsAddr}, "haStatus", "-c", "DefaultCluster", "--json"); code != 0 {
		t.Fatalf("haStatus --json: exit %d: %s", code, e)
	} else {
		var roles []string
		for _, l := range strings.Split(strings.TrimSpace(o), "\n") {
			var st broker.HAStatus
			if err := json.Unmarshal([]byte(l), &st); err != nil {
				t.Fatalf("haStatus --json line %q: %v", l, err)
			}
			roles = append(roles, st.Role)
		}
		if strings.Join(roles, ",") != "async_master,slave" {
			t.Fatalf("haStatus --json roles %v; want the master, then the slave:\n%s", roles, o)
		}
	}

	if code, _, e := runAdminCmd(env, "haStatus", "-n", m.nsAddr, "-c", "Nope"); code != 1 || !strings.Contains(e, `no broker in cluster "Nope"`) {
		t.Fatalf("haStatus -c Nope: exit %d, %q; want 1 naming the cluster", code, e)
	}
	if code, _, e := runAdminCmd(env, "haStatus"); code != 2 || !strings.Contains(e, "need -b") {
		t.Fatalf("haStatus without -b or -n: exit %d, %q; want 2", code, e)
	}

	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + httpAddr + "/ha")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st broker.HAStatus
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &st) != nil ||
		st.Role != broker.RoleAsyncMaster || st.HAListen != haAddr || len(st.Slaves) != 1 {
		t.Fatalf("GET /ha: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// promote and demote send their code to -b and report the broker's answer:
// SUCCESS exits 0, an error exits 1 with the broker's remark; -b is
// required and names one broker; unknown commands exit 2.
func TestAdminPromoteDemote(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	got := make(chan remoting.RequestCode, 4)
	srv := remoting.NewServer(remoting.ServerConfig{Addr: addr}, remoting.HandlerFunc(
		func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			got <- remoting.RequestCode(req.Code)
			if req.Code == int32(remoting.DemoteBroker) {
				return remoting.NewResponse(req, remoting.SystemError, "demote broker-a: no lease to hand over")
			}
			return remoting.NewResponse(req, remoting.Success, "")
		}))
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx)

	if code, o, e := runAdminCmd(nil, "promote", "-b", addr); code != 0 || !strings.Contains(o, "promote "+addr+": under way") {
		t.Fatalf("promote: exit %d, %q %q", code, o, e)
	}
	if c := <-got; c != remoting.PromoteBroker {
		t.Fatalf("promote sent %v", c)
	}
	if code, _, e := runAdminCmd(nil, "demote", "--broker", addr); code != 1 || !strings.Contains(e, "SYSTEM_ERROR: demote broker-a: no lease to hand over") {
		t.Fatalf("demote answered an error: exit %d, %q; want 1 with the remark", code, e)
	}
	if c := <-got; c != remoting.DemoteBroker {
		t.Fatalf("demote sent %v", c)
	}
	for _, args := range [][]string{{"promote"}, {"demote", "-b", addr + "," + addr}, {"promote", "-b", addr, "extra"}, {"nosuch"}} {
		if code, _, _ := runAdminCmd(nil, args...); code != 2 {
			t.Fatalf("admin %v: exit %d, want 2", args, code)
		}
	}
	if code, o, _ := runAdminCmd(nil, "-h"); code != 0 || !strings.Contains(o, "haStatus") || !strings.Contains(o, "promote") || !strings.Contains(o, "demote") {
		t.Fatalf("admin -h: exit %d:\n%s", code, o)
	}
}
