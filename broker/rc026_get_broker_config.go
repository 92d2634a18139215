package broker

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// getBrokerConfig handles GET_BROKER_CONFIG (26) (mqadmin getBrokerConfig):
// the body is the broker's settings as Java properties, key=value a line:
// RocketMQ's names for those that have one (brokerClusterName, brokerName,
// brokerId, listenPort, flushDiskType, brokerRole, ...), then every
// STRATAMQ_ setting by its variable name. The broker's settings hold no
// secret (credentials and the bucket URL are the command's, not here).
func (b *Broker) getBrokerConfig(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = []byte(brokerConfigProperties(b.cfg))
	return resp
}

func brokerConfigProperties(cfg Config) string {
	flush := "ASYNC_FLUSH"
	if cfg.Flush == "sync" {
		flush = "SYNC_FLUSH"
	}
	port := cfg.Listen[strings.LastIndexByte(cfg.Listen, ':')+1:]
	lines := []string{
		"brokerClusterName=" + cfg.Cluster,
		"brokerName=" + cfg.BrokerName,
		fmt.Sprintf("brokerId=%d", cfg.BrokerID),
		"listenPort=" + port,
		"flushDiskType=" + flush,
		"brokerRole=" + strings.ToUpper(cfg.Role),
		fmt.Sprintf("autoCreateTopicEnable=%t", cfg.AutoCreateTopic),
		fmt.Sprintf("maxMessageSize=%d", int64(cfg.MaxMessageSize)),
		"messageDelayLevel=" + cfg.DelayLevels,
		fmt.Sprintf("traceTopicEnable=%t", cfg.TraceTopicEnable),
		"msgTraceTopicName=" + cfg.MsgTraceTopicName,
		"namesrvAddr=" + cfg.Namesrv,
		"storePathRootDir=" + cfg.DataDir,
	}
	var env []string
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("env")
		if tag == "" || tag == "-" {
			continue
		}
		val := v.Field(i).Interface()
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		env = append(env, fmt.Sprintf("STRATAMQ_%s=%v", tag, val))
	}
	sort.Strings(env)
	return strings.Join(append(lines, env...), "\n") + "\n"
}
