package s3fake

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Fake. The zero value is S3's behaviour.
type Options struct {
	// MaxKeys caps the keys in one ListObjectsV2 page; 0 means 1000.
	MaxKeys int
	// MinPartSize is the smallest part, other than the last, that
	// CompleteMultipartUpload accepts; 0 means 5 MiB.
	MinPartSize int64
	// AccessKey, if set, must appear in every request's credential scope.
	AccessKey string
}

// A Hook intercepts one request. It either writes a response itself, or
// calls serve (possibly with a wrapped ResponseWriter) to let the fake
// answer.
type Hook func(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc)

// Fake is an in-process S3 server. Create it with New.
type Fake struct {
	srv  *httptest.Server
	opts Options

	// mu guards everything below; it is never held while reading a request
	// body or writing a response body.
	mu struct {
		sync.Mutex
		buckets map[string]*bucket
		uploads map[string]*upload
		hooks   []pendingHook
		counts  map[string]int
		seq     int
	}
}

type bucket struct {
	objects map[string]*object
}

type object struct {
	data    []byte // never modified once stored
	etag    string // quoted, as S3 sends it
	modTime time.Time
}

type upload struct {
	bucket, key string
	parts       map[int]*object
}

type pendingHook struct {
	match string
	hook  Hook
}

// New starts a Fake on a loopback port and closes it when tb ends.
func New(tb testing.TB, opts Options) *Fake {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1000
	}
	if opts.MinPartSize <= 0 {
		opts.MinPartSize = 5 << 20
	}
	f := &Fake{opts: opts}
	f.mu.buckets = make(map[string]*bucket)
	f.mu.uploads = make(map[string]*upload)
	f.mu.counts = make(map[string]int)
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	tb.Cleanup(f.Close)
	return f
}

// URL returns the endpoint, "http://127.0.0.1:PORT".
func (f *Fake) URL() string { return f.srv.URL }

// Close stops the server and closes its connections. It is idempotent.
func (f *Fake) Close() {
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// CreateBucket creates a bucket directly, without a request.
func (f *Fake) CreateBucket(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.buckets[name] == nil {
		f.mu.buckets[name] = &bucket{objects: make(map[string]*object)}
	}
}

// Next installs hook for the next request whose HTTP method or S3
// operation name equals match ("" matches every request). Hooks run once,
// in the order they were installed.
func (f *Fake) Next(match string, hook Hook) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.hooks = append(f.mu.hooks, pendingHook{match, hook})
}

// Fail makes the next n requests matching match fail with the given HTTP
// status and S3 error code, e.g. Fail("PUT", 2, 503, "SlowDown").
func (f *Fake) Fail(match string, n int, status int, code string) {
	for range n {
		f.Next(match, Status(status, code))
	}
}

// PendingHooks returns how many installed hooks have not fired yet.
func (f *Fake) PendingHooks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mu.hooks)
}

// Count returns how many requests matching match (an HTTP method or an S3
// operation name) the fake has received, including intercepted ones.
func (f *Fake) Count(match string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.counts[match]
}

// PendingUploads returns the number of multipart uploads neither completed
// nor aborted.
func (f *Fake) PendingUploads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mu.uploads)
}

// Object returns a copy of a stored object's bytes.
func (f *Fake) Object(bucketName, key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.mu.buckets[bucketName]
	if b == nil || b.objects[key] == nil {
		return nil, false
	}
	return slices.Clone(b.objects[key].data), true
}

// --- hooks ---

// SlowDown answers 503 SlowDown, S3's request to back off.
func SlowDown() Hook { return Status(http.StatusServiceUnavailable, "SlowDown") }

// Status answers with an S3 error response.
func Status(status int, code string) Hook {
	return func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeError(w, r, status, code, "injected by s3fake")
	}
}

// Delay waits d (or until the client gives up), then serves the request.
func Delay(d time.Duration) Hook {
	return func(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			serve(w, r)
		case <-r.Context().Done():
		}
	}
}

// Truncate serves the request but sends only the first n bytes of the
// response body, then drops the connection: the client sees a body shorter
// than its Content-Length.
func Truncate(n int64) Hook {
	return func(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
		tw := &truncWriter{ResponseWriter: w, left: n}
		serve(tw, r)
		if tw.cut {
			panic(http.ErrAbortHandler) // net/http closes the connection quietly
		}
	}
}

// GoAway drops the connection without answering, as a server that crashed
// or a load balancer that gave up would.
func GoAway() Hook {
	return func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) {
		panic(http.ErrAbortHandler)
	}
}

type truncWriter struct {
	http.ResponseWriter
	left int64
	cut  bool
}

func (t *truncWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > t.left {
		p = p[:t.left]
		t.cut = true
	}
	n, err := t.ResponseWriter.Write(p)
	t.left -= int64(n)
	if t.cut {
		if fl, ok := t.ResponseWriter.(http.Flusher); ok {
			fl.Flush()
		}
		return n, errors.New("s3fake: truncated")
	}
	return n, err
}

// --- request routing ---

// op names the S3 operation of a path-style request.
func op(r *http.Request, bucketName, key string) string {
	q := r.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch {
	case bucketName == "":
		return "ListBuckets"
	case key == "":
		switch r.Method {
		case http.MethodPut:
			return "CreateBucket"
		case http.MethodHead:
			return "HeadBucket"
		case http.MethodDelete:
			return "DeleteBucket"
		case http.MethodGet:
			if has("location") {
				return "GetBucketLocation"
			}
			if q.Get("list-type") == "2" {
				return "ListObjectsV2"
			}
			return "ListObjects"
		}
	default:
		// Object requests: the same methods as for a bucket, other operations.
		switch r.Method {
		case http.MethodPut:
			if has("uploadId") {
				return "UploadPart"
			}
			return "PutObject"
		case http.MethodGet:
			return "GetObject"
		case http.MethodHead:
			return "HeadObject"
		case http.MethodDelete:
			if has("uploadId") {
				return "AbortMultipartUpload"
			}
			return "DeleteObject"
		case http.MethodPost:
			if has("uploads") {
				return "CreateMultipartUpload"
			}
			if has("uploadId") {
				return "CompleteMultipartUpload"
			}
		}
	}
	return "Unknown"
}

func splitPath(p string) (bucketName, key string) {
	p = strings.TrimPrefix(p, "/")
	bucketName, key, _ = strings.Cut(p, "/")
	return bucketName, key
}

func (f *Fake) handle(w http.ResponseWriter, r *http.Request) {
	bucketName, key := splitPath(r.URL.Path)
	name := op(r, bucketName, key)

	f.mu.Lock()
	f.mu.seq++
	f.mu.counts[name]++
	f.mu.counts[r.Method]++
	f.mu.counts[""]++
	var hook Hook
	for i, h := range f.mu.hooks {
		if h.match == "" || h.match == name || h.match == r.Method {
			hook = h.hook
			f.mu.hooks = slices.Delete(f.mu.hooks, i, i+1)
			break
		}
	}
	seq := f.mu.seq
	f.mu.Unlock()
	w.Header().Set("x-amz-request-id", fmt.Sprintf("s3fake-%d", seq))

	serve := func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, name, bucketName, key) }
	if hook != nil {
		hook(w, r, serve)
		return
	}
	serve(w, r)
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request, name, bucketName, key string) {
	if f.opts.AccessKey != "" && !strings.Contains(r.Header.Get("Authorization"), "Credential="+f.opts.AccessKey+"/") &&
		!strings.HasPrefix(r.URL.Query().Get("X-Amz-Credential"), f.opts.AccessKey+"/") {
		writeError(w, r, http.StatusForbidden, "InvalidAccessKeyId", "The AWS access key Id you provided does not exist in our records.")
		return
	}
	switch name {
	case "CreateBucket":
		f.createBucket(w, r, bucketName)
	case "HeadBucket":
		if f.bucket(bucketName) == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	case "GetBucketLocation":
		if f.bucket(bucketName) == nil {
			writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
			return
		}
		writeXML(w, http.StatusOK, struct {
			XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ LocationConstraint"`
		}{})
	case "ListObjectsV2":
		f.list(w, r, bucketName)
	case "PutObject":
		if r.Header.Get("x-amz-copy-source") != "" {
			writeError(w, r, http.StatusNotImplemented, "NotImplemented", "CopyObject is not supported by s3fake")
			return
		}
		f.putObject(w, r, bucketName, key)
	case "GetObject", "HeadObject":
		f.getObject(w, r, bucketName, key, name == "HeadObject")
	case "DeleteObject":
		f.deleteObject(w, r, bucketName, key)
	case "CreateMultipartUpload":
		f.createUpload(w, r, bucketName, key)
	case "UploadPart":
		f.uploadPart(w, r, bucketName, key)
	case "CompleteMultipartUpload":
		f.completeUpload(w, r, bucketName, key)
	case "AbortMultipartUpload":
		f.abortUpload(w, r)
	default:
		writeError(w, r, http.StatusNotImplemented, "NotImplemented", "s3fake does not support "+name)
	}
}

func (f *Fake) bucket(name string) *bucket {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.buckets[name]
}

func (f *Fake) createBucket(w http.ResponseWriter, r *http.Request, name string) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	exists := f.mu.buckets[name] != nil
	if !exists {
		f.mu.buckets[name] = &bucket{objects: make(map[string]*object)}
	}
	f.mu.Unlock()
	if exists {
		writeError(w, r, http.StatusConflict, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.")
		return
	}
	w.Header().Set("Location", "/"+name)
	w.WriteHeader(http.StatusOK)
}

// --- objects ---

// checkCond applies If-None-Match / If-Match to the current object; it
// returns the failing status and code, or 0. Called with f.mu held.
func checkCond(r *http.Request, cur *object) (int, string) {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if cur != nil && (inm == "*" || unquote(inm) == unquote(cur.etag)) {
			return http.StatusPreconditionFailed, "PreconditionFailed"
		}
	}
	if im := r.Header.Get("If-Match"); im != "" {
		if cur == nil {
			return http.StatusNotFound, "NoSuchKey"
		}
		if im != "*" && unquote(im) != unquote(cur.etag) {
			return http.StatusPreconditionFailed, "PreconditionFailed"
		}
	}
	return 0, ""
}

func unquote(s string) string { return strings.Trim(s, `"`) }

func (f *Fake) putObject(w http.ResponseWriter, r *http.Request, bucketName, key string) {
	data, status, code, err := readBody(r)
	if err != nil {
		writeError(w, r, status, code, err.Error())
		return
	}
	sum := md5.Sum(data)
	obj := &object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`, modTime: time.Now().UTC()}
	f.mu.Lock()
	b := f.mu.buckets[bucketName]
	if b == nil {
		f.mu.Unlock()
		writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	if status, code := checkCond(r, b.objects[key]); status != 0 {
		f.mu.Unlock()
		writeError(w, r, status, code, "At least one of the pre-conditions you specified did not hold")
		return
	}
	b.objects[key] = obj
	f.mu.Unlock()
	w.Header().Set("ETag", obj.etag)
	w.WriteHeader(http.StatusOK)
}

func (f *Fake) lookup(bucketName, key string) (*object, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.mu.buckets[bucketName]
	if b == nil {
		return nil, "NoSuchBucket"
	}
	if o := b.objects[key]; o != nil {
		return o, ""
	}
	return nil, "NoSuchKey"
}

func (f *Fake) getObject(w http.ResponseWriter, r *http.Request, bucketName, key string, head bool) {
	o, code := f.lookup(bucketName, key)
	if o == nil {
		if head {
			w.WriteHeader(http.StatusNotFound) // HEAD responses have no body
			return
		}
		writeError(w, r, http.StatusNotFound, code, "The specified key does not exist.")
		return
	}
	size := int64(len(o.data))
	h := w.Header()
	h.Set("ETag", o.etag)
	h.Set("Last-Modified", o.modTime.Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	start, end, status := int64(0), size-1, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		var ok bool
		start, end, ok = parseRange(rg, size)
		if !ok {
			if head {
				w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
				return
			}
			h.Del("ETag")
			writeError(w, r, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable")
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, size))
		status = http.StatusPartialContent
	}
	h.Set("Content-Length", strconv.FormatInt(end-start+1, 10))
	w.WriteHeader(status)
	if !head {
		_, _ = w.Write(o.data[start : end+1])
	}
}

// parseRange parses a single "bytes=" range as S3 does: a start past the
// end is unsatisfiable, an end past the end is clamped.
func parseRange(s string, size int64) (start, end int64, ok bool) {
	spec, found := strings.CutPrefix(s, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false
	}
	if a == "" { // suffix range: the last b bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 || size == 0 {
			return 0, 0, false
		}
		return max(0, size-n), size - 1, true
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0, 0, false
	}
	end = size - 1
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < start {
			return 0, 0, false
		}
		end = min(e, size-1)
	}
	return start, end, true
}

func (f *Fake) deleteObject(w http.ResponseWriter, r *http.Request, bucketName, key string) {
	f.mu.Lock()
	b := f.mu.buckets[bucketName]
	if b != nil {
		delete(b.objects, key)
	}
	f.mu.Unlock()
	if b == nil {
		writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type listContents struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type listResult struct {
	XMLName               xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	KeyCount              int            `xml:"KeyCount"`
	MaxKeys               int            `xml:"MaxKeys"`
	IsTruncated           bool           `xml:"IsTruncated"`
	Contents              []listContents `xml:"Contents"`
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request, bucketName string) {
	q := r.URL.Query()
	if q.Get("delimiter") != "" {
		writeError(w, r, http.StatusNotImplemented, "NotImplemented", "s3fake does not support delimiter")
		return
	}
	res := listResult{Name: bucketName, Prefix: q.Get("prefix"), StartAfter: q.Get("start-after"),
		ContinuationToken: q.Get("continuation-token"), MaxKeys: f.opts.MaxKeys}
	if mk := q.Get("max-keys"); mk != "" {
		n, err := strconv.Atoi(mk)
		if err != nil || n < 0 {
			writeError(w, r, http.StatusBadRequest, "InvalidArgument", "bad max-keys")
			return
		}
		res.MaxKeys = min(n, f.opts.MaxKeys)
	}
	after := res.StartAfter
	if tok := res.ContinuationToken; tok != "" {
		k, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
			return
		}
		after = max(after, string(k))
	}

	f.mu.Lock()
	b := f.mu.buckets[bucketName]
	var keys []string
	objs := make(map[string]*object)
	if b != nil {
		for k, o := range b.objects {
			if strings.HasPrefix(k, res.Prefix) && k > after {
				keys = append(keys, k)
				objs[k] = o
			}
		}
	}
	f.mu.Unlock()
	if b == nil {
		writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	slices.Sort(keys)
	if len(keys) > res.MaxKeys {
		keys = keys[:res.MaxKeys]
		res.IsTruncated = true
		res.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(keys[len(keys)-1]))
	}
	for _, k := range keys {
		o := objs[k]
		res.Contents = append(res.Contents, listContents{Key: k, Size: int64(len(o.data)), ETag: o.etag,
			LastModified: o.modTime.Format("2006-01-02T15:04:05.000Z"), StorageClass: "STANDARD"})
	}
	res.KeyCount = len(res.Contents)
	writeXML(w, http.StatusOK, res)
}

// --- multipart ---

func (f *Fake) createUpload(w http.ResponseWriter, r *http.Request, bucketName, key string) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	if f.mu.buckets[bucketName] == nil {
		f.mu.Unlock()
		writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	f.mu.seq++
	id := fmt.Sprintf("upload-%d", f.mu.seq)
	f.mu.uploads[id] = &upload{bucket: bucketName, key: key, parts: make(map[int]*object)}
	f.mu.Unlock()
	writeXML(w, http.StatusOK, struct {
		XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		UploadID string   `xml:"UploadId"`
	}{Bucket: bucketName, Key: key, UploadID: id})
}

func (f *Fake) uploadPart(w http.ResponseWriter, r *http.Request, bucketName, key string) {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("partNumber"))
	if err != nil || n < 1 || n > 10000 {
		writeError(w, r, http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000")
		return
	}
	data, status, code, err := readBody(r)
	if err != nil {
		writeError(w, r, status, code, err.Error())
		return
	}
	sum := md5.Sum(data)
	part := &object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`}
	f.mu.Lock()
	u := f.mu.uploads[q.Get("uploadId")]
	if u != nil && u.bucket == bucketName && u.key == key {
		u.parts[n] = part
	}
	f.mu.Unlock()
	if u == nil {
		writeError(w, r, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist")
		return
	}
	w.Header().Set("ETag", part.etag)
	w.WriteHeader(http.StatusOK)
}

func (f *Fake) completeUpload(w http.ResponseWriter, r *http.Request, bucketName, key string) {
	body, status, code, err := readBody(r)
	if err != nil {
		writeError(w, r, status, code, err.Error())
		return
	}
	var req struct {
		Parts []struct {
			PartNumber int    `xml:"PartNumber"`
			ETag       string `xml:"ETag"`
		} `xml:"Part"`
	}
	if err := xml.Unmarshal(body, &req); err != nil || len(req.Parts) == 0 {
		writeError(w, r, http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed")
		return
	}
	id := r.URL.Query().Get("uploadId")

	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.mu.uploads[id]
	b := f.mu.buckets[bucketName]
	if u == nil || b == nil || u.bucket != bucketName || u.key != key {
		writeError(w, r, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist")
		return
	}
	var data []byte
	md5s := md5.New()
	for i, p := range req.Parts {
		part := u.parts[p.PartNumber]
		switch {
		case i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber:
			writeError(w, r, http.StatusBadRequest, "InvalidPartOrder", "The list of parts was not in ascending order")
			return
		case part == nil || unquote(p.ETag) != unquote(part.etag):
			writeError(w, r, http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found")
			return
		case i < len(req.Parts)-1 && int64(len(part.data)) < f.opts.MinPartSize:
			writeError(w, r, http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size")
			return
		}
		raw, _ := hex.DecodeString(unquote(part.etag))
		md5s.Write(raw)
		data = append(data, part.data...)
	}
	if status, code := checkCond(r, b.objects[key]); status != 0 {
		writeError(w, r, status, code, "At least one of the pre-conditions you specified did not hold")
		return
	}
	obj := &object{data: data, etag: fmt.Sprintf(`"%x-%d"`, md5s.Sum(nil), len(req.Parts)), modTime: time.Now().UTC()}
	b.objects[key] = obj
	delete(f.mu.uploads, id)
	writeXML(w, http.StatusOK, struct {
		XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
		Location string   `xml:"Location"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		ETag     string   `xml:"ETag"`
	}{Location: "/" + bucketName + "/" + key, Bucket: bucketName, Key: key, ETag: obj.etag})
}

func (f *Fake) abortUpload(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("uploadId")
	f.mu.Lock()
	_, ok := f.mu.uploads[id]
	delete(f.mu.uploads, id)
	f.mu.Unlock()
	if !ok {
		writeError(w, r, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// --- bodies and responses ---

// readBody reads a request body, undoing aws-chunked framing and checking a
// hex x-amz-content-sha256. On error it returns the S3 status and code.
func readBody(r *http.Request) (data []byte, status int, code string, err error) {
	sha := r.Header.Get("x-amz-content-sha256")
	if strings.HasPrefix(sha, "STREAMING-") || strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
		data, err = decodeChunked(bufio.NewReader(r.Body))
		if err != nil {
			return nil, http.StatusBadRequest, "IncompleteBody", fmt.Errorf("aws-chunked body: %w", err)
		}
		if dl := r.Header.Get("x-amz-decoded-content-length"); dl != "" && dl != strconv.Itoa(len(data)) {
			return nil, http.StatusBadRequest, "IncompleteBody", fmt.Errorf("decoded %d bytes, header says %s", len(data), dl)
		}
		return data, 0, "", nil
	}
	data, err = io.ReadAll(r.Body)
	if err != nil {
		// The client went away or sent less than its Content-Length.
		return nil, http.StatusBadRequest, "IncompleteBody", err
	}
	if len(sha) == 64 {
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sha {
			return nil, http.StatusBadRequest, "XAmzContentSHA256Mismatch", errors.New("the provided 'x-amz-content-sha256' header does not match what was computed")
		}
	}
	return data, 0, "", nil
}

// decodeChunked undoes aws-chunked framing:
//
//	<hex size>[;chunk-signature=<sig>]\r\n<data>\r\n ... 0[;...]\r\n[<trailer>\r\n ...]\r\n
func decodeChunked(br *bufio.Reader) ([]byte, error) {
	var out bytes.Buffer
	for chunks := 0; ; chunks++ {
		if chunks > 1<<20 {
			return nil, errors.New("too many chunks")
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		sizeHex, _, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ";")
		n, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad chunk size %q", sizeHex)
		}
		if n == 0 {
			// Trailers (x-amz-checksum-*, x-amz-trailer-signature) follow.
			for range 64 {
				l, err := br.ReadString('\n')
				if strings.TrimRight(l, "\r\n") == "" || err != nil {
					return out.Bytes(), nil
				}
			}
			return nil, errors.New("too many trailers")
		}
		if _, err := io.CopyN(&out, br, n); err != nil {
			return nil, err
		}
		if crlf, err := br.ReadString('\n'); err != nil || crlf != "\r\n" {
			return nil, errors.New("chunk not followed by CRLF")
		}
	}
}

func writeXML(w http.ResponseWriter, status int, v any) {
	body, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	writeXML(w, status, struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string   `xml:"Code"`
		Message   string   `xml:"Message"`
		Resource  string   `xml:"Resource"`
		RequestID string   `xml:"RequestId"`
	}{Code: code, Message: msg, Resource: r.URL.Path, RequestID: w.Header().Get("x-amz-request-id")})
}
