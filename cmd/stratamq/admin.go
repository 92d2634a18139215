package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/remoting"
)

// `stratamq admin <command> [flags]`: operations on running brokers over
// the remoting protocol, named and flagged as RocketMQ's mqadmin names them
// (-n name servers, -b broker address, -c cluster). Each command is one
// entry of adminCommands and one small func; adminEnv has what they share.

// adminCommand is one `stratamq admin` command.
type adminCommand struct {
	name    string
	args    string // its flags, for the usage line
	summary string
	run     func(ctx context.Context, e *adminEnv, args []string) error
}

// adminCommands is the table of commands, in the order usage lists them.
func adminCommands() []adminCommand {
	return []adminCommand{
		{"haStatus", "-b addr[,addr] | -n namesrv [-c cluster] [--json]",
			"replication status: role, epoch, failovers, each slave's lag (bytes and time)", adminHAStatus},
		{"promote", "-b addr", "make a slave take the bucket lease and become the master of its brokerName now", adminPromote},
		{"demote", "-b addr", "make a master hand the lease over and rejoin as a slave", adminDemote},
		{"dlqList", "-g group (-b addr[,addr] | -n namesrv [-c cluster]) [--max n] [--json]",
			"a consumer group's dead-letter messages (%DLQ%<group>): msgId, original topic, reconsume times", adminDLQList},
		{"dlqResend", "-g group (-b addr[,addr] | -n namesrv [-c cluster]) [--msgId id[,id]]",
			"send dead-letter messages (all, or these msgIds) back to the group's retry topic: only that group consumes them again, with their original topic and msgId", adminDLQResend},
		{"resetOffsetByTime", "-g group -t topic -s time [-f=false] (-n namesrv | -b addr)",
			"rewind or move a consumer group to the messages stored at a time, across the tiers, while its consumers run", adminResetOffsetByTime},
		{"getConsumerStatus", "-g group -t topic [-i clientAddr] (-n namesrv | -b addr)",
			"each live consumer's offsets of a topic, as the clients report them (after a reset, their new positions)", adminGetConsumerStatus},
		{"queryMsgByKey", "-t topic -k key [-c maxNum] [-f begin] [-e end] -b addr[,addr] | -n namesrv",
			"messages of a topic whose KEYS hold key (QUERY_MESSAGE), local and in the bucket", adminQueryMsgByKey},
		{"updateTopic", "-t topic [-r n] [-w n] [-p perm] [-o] [-a +key=value,-key] (-b addr[,addr] | -n namesrv [-c cluster])",
			"create or update a topic; -a sets attributes, e.g. +" + broker.RetentionAttribute + "=1m (its own retention; -1 forever), +message.type=FIFO (what gRPC producers may send)", adminUpdateTopic},
		{"topicRetention", "-b addr[,addr] | -n namesrv [-c cluster] [--json]",
			"each topic's retention, its oldest retained message, and the bucket bytes kept only because of it", adminTopicRetention},
		{"topicList", "-n namesrv [--json]", "every topic the name servers route, one a line", adminTopicList},
		{"topicRoute", "-t topic -n namesrv [--json]", "a topic's route: its brokers (masters and slaves) and queue counts", adminTopicRoute},
		{"topicStatus", "-t topic -n namesrv [--json]", "each queue's min and max offset, across the tiers", adminTopicStatus},
		{"deleteTopic", "-t topic -n namesrv [-c cluster]", "delete a topic from its masters and the name servers", adminDeleteTopic},
		{"clusterList", "-n namesrv [-c cluster] [--json]", "every broker the name servers know, by cluster", adminClusterList},
		{"consumerProgress", "-g group -t topic -n namesrv [--json]", "a group's committed offset and lag per queue, and the total lag", adminConsumerProgress},
		{"updateSubGroup", "-g group [-r retryMaxTimes] [-q retryQueues] [-s=false] [-o] [-i brokerId] [-w brokerId] (-b addr | -n namesrv [-c cluster])",
			"create or update a consumer group's config", adminUpdateSubGroup},
		{"deleteSubGroup", "-g group [--removeOffset] (-b addr | -n namesrv [-c cluster])", "delete a consumer group's config (and its offsets)", adminDeleteSubGroup},
		{"consumerConnection", "-g group (-b addr | -n namesrv) [--json]", "a group's live clients and subscriptions", adminConsumerConnection},
		{"brokerStatus", "-b addr[,addr] | -n namesrv [-c cluster] [--json]", "each broker's runtime state (GET_BROKER_RUNTIME_INFO)", adminBrokerStatus},
		{"getBrokerConfig", "-b addr[,addr] | -n namesrv [-c cluster]", "each broker's settings, as properties", adminGetBrokerConfig},
		{"queryMsgByOffset", "-t topic -i queueId -o offset [-b brokerName] -n namesrv", "the message at a queue offset (local or in the bucket)", adminQueryMsgByOffset},
		{"tierStatus", "-b addr[,addr] | -n namesrv [-c cluster] [--json]",
			"each broker's log: segments and bytes local and in the bucket, upload lag, the oldest message still readable", adminTierStatus},
		{"queryMsgById", "-i msgId [-t topic] -b addr[,addr] | -n namesrv",
			"a message by its offsetMsgId (VIEW_MESSAGE_BY_ID) or, with -t, by the client's msgId (UNIQ_KEY)", adminQueryMsgByID},
		{"queryMsgTraceById", "-i msgId [-t traceTopic] [-b begin] [-e end] [-num n] (-n namesrv | --broker addr[,addr]) [--json]",
			"a message's trace: its send and each consumer group's consumptions (client host, time, cost, status), from the trace records clients with tracing on write", adminQueryMsgTraceByID},
		{"createUser", "-u user -p password [-t Super|Normal] (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: make a user (its username is the AccessKey clients sign with, its password the SecretKey)", adminCreateUser},
		{"updateUser", "-u user [-p password] [-t Super|Normal] [-s enable|disable] (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: change a user's password, type or status", adminUpdateUser},
		{"deleteUser", "-u user (-b addr[,addr] | -n namesrv [-c cluster])", "ACL 2.0: delete a user and its ACL", adminDeleteUser},
		{"getUser", "-u user (-b addr[,addr] | -n namesrv [-c cluster]) [--json]", "ACL 2.0: a user's type and status (never its password)", adminGetUser},
		{"listUser", "[-f filter] (-b addr[,addr] | -n namesrv [-c cluster]) [--json]", "ACL 2.0: the users", adminListUser},
		{"createAcl", "-s User:name -r resource[,resource] -a action[,action] [-i ip[,cidr]] -d Allow|Deny (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: add policy entries to a user's ACL (an entry on the same resource is replaced); resources *, Topic:name, Topic:prefix*, Topic:*, Group:..., Cluster:...", adminCreateAcl},
		{"updateAcl", "-s User:name -r resource[,resource] -a action[,action] [-i ip[,cidr]] -d Allow|Deny (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: change a user's existing ACL as createAcl does", adminUpdateAcl},
		{"deleteAcl", "-s User:name [-r resource[,resource]] (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: delete a user's entries on these resources, or its whole ACL", adminDeleteAcl},
		{"getAcl", "-s User:name (-b addr[,addr] | -n namesrv [-c cluster]) [--json]", "ACL 2.0: a user's policy entries", adminGetAcl},
		{"migrateAcl", "-f plain_acl.yml (-b addr[,addr] | -n namesrv [-c cluster])",
			"ACL 2.0: make users and ACLs that decide signed requests as an ACL 1.0 plain_acl.yml did (an existing user is updated; what 2.0 cannot say is printed as a warning)", adminMigrateAcl},
		{"listAcl", "[-s subjectFilter] [-r resourceFilter] (-b addr[,addr] | -n namesrv [-c cluster]) [--json]", "ACL 2.0: the ACLs", adminListAcl},
	}
}

func adminUsage(w io.Writer) {
	fmt.Fprint(w, "usage: stratamq admin <command> [flags]\n\ncommands:\n")
	for _, c := range adminCommands() {
		fmt.Fprintf(w, "  %-17s %s\n                    %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, "\n-n defaults to $NAMESRV_ADDR (mqadmin's), then $STRATAMQ_NAMESRV; several name servers are separated by ';'.\n"+
		"With an ACL (STRATAMQ_ACL_FILE), every command signs with --access-key and --secret-key, or STRATAMQ_ACCESS_KEY and\n"+
		"STRATAMQ_SECRET_KEY (the variable keeps the secret out of the process list); most commands need an admin account.\n"+
		"Run 'stratamq admin <command> -h' for its flags.\n")
}

// errAdminUsage marks a usage error (exit status 2; others are 1).
var errAdminUsage = errors.New("usage")

// runAdmin is `stratamq admin ...`.
func runAdmin(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		adminUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		adminUsage(stdout)
		return 0
	}
	for _, c := range adminCommands() {
		if c.name != args[0] {
			continue
		}
		e := &adminEnv{stdout: stdout, stderr: stderr, environ: environ, name: c.name, args: c.args}
		defer e.close()
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errAdminUsage):
			fmt.Fprintf(stderr, "stratamq admin %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "stratamq admin %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "stratamq admin: unknown command %q\n\n", args[0])
	adminUsage(stderr)
	return 2
}

// adminEnv is what the commands share: output, environment, one remoting
// client (dialled lazily, closed by runAdmin) and the common flags.
type adminEnv struct {
	stdout, stderr io.Writer
	environ        map[string]string
	name, args     string
	cl             *remoting.Client
	creds          acl.Credentials // --access-key, --secret-key (acl.go); zero: unsigned

	namesrv, brokers, cluster string
	timeout                   time.Duration
	mastersOnly               bool // targets from -n: brokerId 0 only
}

func (e *adminEnv) close() {
	if e.cl != nil {
		e.cl.Close()
	}
}

// flags is the FlagSet of a command with the common flags named in which
// ("n", "b", "c": -n/--namesrv, -b/--broker, -c/--cluster) and --timeout.
func (e *adminEnv) flags(which ...string) *flag.FlagSet {
	fs := flag.NewFlagSet("admin "+e.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: stratamq admin %s %s\n\n", e.name, e.args)
		fs.PrintDefaults()
	}
	for _, w := range which {
		switch w {
		case "n":
			def := e.environ["NAMESRV_ADDR"]
			if def == "" {
				def = e.environ["STRATAMQ_NAMESRV"]
			}
			fs.StringVar(&e.namesrv, "n", def, "name server address(es), host:port[;host:port]")
			fs.StringVar(&e.namesrv, "namesrv", def, "same as -n")
		case "b":
			fs.StringVar(&e.brokers, "b", "", "broker address(es), host:port[,host:port]")
			fs.StringVar(&e.brokers, "broker", "", "same as -b")
		case "c":
			fs.StringVar(&e.cluster, "c", "", "cluster name (with -n; default every cluster)")
			fs.StringVar(&e.cluster, "cluster", "", "same as -c")
		}
	}
	fs.DurationVar(&e.timeout, "timeout", 5*time.Second, "per-request timeout")
	credentialFlags(fs, e.environ, &e.creds)
	return fs
}

// parse parses args with fs and refuses positional arguments.
func (e *adminEnv) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errAdminUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errAdminUsage, fs.Args())
	}
	if e.timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errAdminUsage)
	}
	if err := checkCredentials(e.creds); err != nil {
		return fmt.Errorf("%w: %v", errAdminUsage, err)
	}
	return nil
}

// invoke sends req to addr and returns a SUCCESS response; any other code
// is an error naming the code and the remark.
func (e *adminEnv) invoke(ctx context.Context, addr string, req *remoting.Command) (*remoting.Command, error) {
	resp, err := e.invokeAny(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	if resp.Code == int32(remoting.QueryNotFound) && req.Code == int32(remoting.QueryConsumerOffset) {
		return nil, &offsetNotFound{remark: resp.Remark}
	}
	if resp.Code != int32(remoting.Success) {
		return nil, fmt.Errorf("%s to %s: %s: %s", remoting.RequestCode(req.Code), addr, remoting.ResponseCode(resp.Code), resp.Remark)
	}
	return resp, nil
}

// namesrvInvoke sends req to the name servers of -n in turn and returns
// the first SUCCESS answer.
func (e *adminEnv) namesrvInvoke(ctx context.Context, req *remoting.Command) (*remoting.Command, error) {
	var errs []error
	for _, ns := range strings.Split(e.namesrv, ";") {
		if ns = strings.TrimSpace(ns); ns == "" {
			continue
		}
		resp, err := e.invoke(ctx, ns, req)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no name server answered: %w", errors.Join(errs...))
}

// clusterInfo is the name servers' GET_BROKER_CLUSTER_INFO.
func (e *adminEnv) clusterInfo(ctx context.Context) (*remoting.ClusterInfo, error) {
	resp, err := e.namesrvInvoke(ctx, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	if err != nil {
		return nil, err
	}
	return remoting.DecodeClusterInfo(resp.Body)
}

// targets is the brokers a command addresses: -b's list, else every broker
// (masters and slaves) of cluster -c, or of every cluster, from the name
// server's GET_BROKER_CLUSTER_INFO, by brokerName and brokerId.
func (e *adminEnv) targets(ctx context.Context) ([]string, error) {
	if e.brokers != "" {
		var out []string
		for _, a := range strings.Split(e.brokers, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out, nil
	}
	if e.namesrv == "" {
		return nil, fmt.Errorf("%w: need -b broker address(es) or -n name server", errAdminUsage)
	}
	ci, err := e.clusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for cluster, ns := range ci.ClusterAddrTable {
		if e.cluster == "" || cluster == e.cluster {
			names = append(names, ns...)
		}
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		bd := ci.BrokerAddrTable[name]
		ids := make([]int64, 0, len(bd.BrokerAddrs))
		for id := range bd.BrokerAddrs {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			if e.mastersOnly && id != 0 {
				continue
			}
			out = append(out, bd.BrokerAddrs[id])
		}
	}
	if len(out) == 0 {
		if e.cluster != "" {
			return nil, fmt.Errorf("the name server knows no broker in cluster %q", e.cluster)
		}
		return nil, errors.New("the name server knows no broker")
	}
	return out, nil
}

// adminHAStatus is `stratamq admin haStatus`: GET_BROKER_HA_STATUS (907)
// to each target, printed readably (--json: each body on a line).
func adminHAStatus(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	asJSON := fs.Bool("json", false, "print each broker's status as the JSON it answered, one line each")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	addrs, err := e.targets(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.GetBrokerHAStatus, nil, nil))
		var st broker.HAStatus
		if err == nil {
			if err = json.Unmarshal(resp.Body, &st); err != nil {
				err = fmt.Errorf("%s: the HA status body does not decode: %w", addr, err)
			}
		}
		if err != nil {
			fmt.Fprintf(e.stdout, "%s: error: %v\n", addr, err)
			errs = append(errs, err)
			continue
		}
		if *asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		printHAStatus(e.stdout, addr, st)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d brokers did not answer: %w", len(errs), len(addrs), errs[0])
	}
	return nil
}

func printHAStatus(w io.Writer, addr string, st broker.HAStatus) {
	fmt.Fprintf(w, "%s (%s) %s: %s, brokerId %d, epoch %d, failovers %d, commitlog end %d",
		st.BrokerName, st.Cluster, addr, st.Role, st.BrokerID, st.Epoch, st.Failovers, st.LocalEnd)
	if st.HAListen != "" {
		fmt.Fprintf(w, ", HA listen %s", st.HAListen)
	}
	fmt.Fprintln(w)
	if f := st.Follow; f != nil {
		state := "disconnected"
		if f.Connected {
			state = "connected"
		}
		master := f.MasterAddr
		if f.MasterBroker != "" {
			master += " (broker " + f.MasterBroker + ")"
		}
		fmt.Fprintf(w, "  master %s: %s, master end %d, lag %d B / %.3f s\n", master, state, f.MasterEnd, f.LagBytes, f.LagSeconds)
		return
	}
	if st.HAListen == "" {
		fmt.Fprintln(w, "  no HA listener (STRATAMQ_HA_LISTEN unset)")
		return
	}
	if len(st.Slaves) == 0 {
		fmt.Fprintln(w, "  no slave connected")
	}
	if st.Role == broker.RoleSyncMaster {
		alone := ""
		if st.AckingAlone {
			alone = ": ACKNOWLEDGING ALONE (no slave in sync)"
		}
		fmt.Fprintf(w, "  in-sync replicas %d (the master included; min %d), sends acknowledged alone %d%s\n",
			st.InSyncReplicas, st.MinInSync, st.AckedAlone, alone)
	}
	for _, s := range st.Slaves {
		sync := "in sync"
		if !s.InSync {
			sync = "NOT in sync (past STRATAMQ_HA_MAX_LAG, or it missed STRATAMQ_HA_ACK_TIMEOUT)"
		}
		fmt.Fprintf(w, "  slave %s (%s): acked %d, lag %d B / %.3f s, %s, last report %.1f s ago\n",
			s.Addr, s.BrokerName, s.Acked, s.LagBytes, s.LagSeconds, sync, st.Time.Sub(s.LastReport).Seconds())
	}
}

// adminPromote is `stratamq admin promote -b addr`.
func adminPromote(ctx context.Context, e *adminEnv, args []string) error {
	return e.roleChange(ctx, args, remoting.PromoteBroker)
}

// adminDemote is `stratamq admin demote -b addr`.
func adminDemote(ctx context.Context, e *adminEnv, args []string) error {
	return e.roleChange(ctx, args, remoting.DemoteBroker)
}

// roleChange sends code (STRATAMQ_PROMOTE_BROKER or _DEMOTE_BROKER) to the
// one broker -b names.
func (e *adminEnv) roleChange(ctx context.Context, args []string, code remoting.RequestCode) error {
	fs := e.flags("b")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if e.brokers == "" || strings.Contains(e.brokers, ",") {
		return fmt.Errorf("%w: -b names the one broker to %s", errAdminUsage, e.name)
	}
	if _, err := e.invoke(ctx, e.brokers, remoting.NewRequest(code, nil, nil)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s %s: under way (follow it with 'stratamq admin haStatus -b %s')\n", e.name, e.brokers, e.brokers)
	return nil
}
