package offsets

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/stratamq/stratamq/infra/vfs"
)

// TestOffsetsEncodeAsEncodingJSON: Encode's hand-written JSON decodes to
// the table encoding/json would write for it (keys needing escapes
// included), keys in byte order and queues in numeric order, and reloads
// to the same offsets.
func TestOffsetsEncodeAsEncodingJSON(t *testing.T) {
	c, err := OpenConsumerOffsets(vfs.NewMem(), "/config")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int64{}
	add := func(group, topic string, q int32, off int64) {
		c.Commit(group, topic, q, off)
		k := tableKey(topic, group)
		if want[k] == nil {
			want[k] = map[string]int64{}
		}
		want[k][strconv.Itoa(int(q))] = off
	}
	for q := int32(0); q < 12; q++ {
		add("g1", "TopicA", q, int64(q)*1000+7)
	}
	add("g2", "%RETRY%g2", 0, 1<<40)
	add(`we"ird\g`, "T<&>\u00e9\n", 3, 0)
	add("g3", "TopicB", -1, -1)
	b, _, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var got offsetFile
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if !reflect.DeepEqual(got.OffsetTable, want) {
		t.Fatalf("decoded %v, want %v", got.OffsetTable, want)
	}
	if want := `{"offsetTable":{"%RETRY%g2@g2":{"0":1099511627776},"T\u003c\u0026\u003eé\n@we\"ird\\g":{"3":0},` +
		`"TopicA@g1":{"0":7,"1":1007,"2":2007,"3":3007,"4":4007,"5":5007,"6":6007,"7":7007,"8":8007,"9":9007,"10":10007,"11":11007},` +
		`"TopicB@g3":{"-1":-1}}}`; string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	r := &ConsumerOffsets{}
	r.mu.table = map[string]map[int32]int64{}
	if err := r.decode(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.mu.table, c.mu.table) {
		t.Fatalf("reloaded %v, want %v", r.mu.table, c.mu.table)
	}
}
