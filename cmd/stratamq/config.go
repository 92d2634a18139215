package main

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/tier/bucketurl"
)

// Config is everything `stratamq serve|namesrv|broker` reads. Each field is
// an environment variable STRATAMQ_<env tag> and the kebab-case flag of the
// same name; flags win over the environment.
type Config struct {
	broker.Config
	NamesrvListen      string        `env:"NAMESRV_LISTEN" envDefault:":9876" help:"name server listen address (serve, namesrv)"`
	HTTPListen         string        `env:"HTTP_LISTEN" envDefault:":5557" help:"metrics and health listen address; empty disables"`
	ConsoleWrite       bool          `env:"CONSOLE_WRITE" help:"without an ACL, take the web console's writes (actions) from any address, not only from loopback; with an ACL a signed-in user is needed wherever they are"`
	ConsoleHistoryStep time.Duration `env:"CONSOLE_HISTORY_STEP" envDefault:"10s" help:"how often the broker samples its metrics for the web console's charts (24 hours kept: this step for the last hour, 5 minutes before; at most 2,000 series, about 6 MB)"`
	ConsolePrices      string        `env:"CONSOLE_PRICES" help:"the bucket's list prices for the console's cost chart, dollars per 1,000 requests: put=0.005,get=0.0004 (AWS S3 Standard, the default)"`
	ConsoleSessionTTL  time.Duration `env:"CONSOLE_SESSION_TTL" envDefault:"8h" help:"how long a web console sign-in lasts"`
	HTTPHosts          string        `env:"HTTP_HOSTS" help:"comma-separated host names the web console answers to, besides IP addresses, localhost, this machine's host name and the advertised and listen hosts; a request naming another Host is refused (DNS rebinding)"`
	LogLevel           string        `env:"LOG_LEVEL" envDefault:"info" help:"debug | info | warn | error"`
	Pprof              bool          `env:"PPROF" help:"serve /debug/pprof/ on the metrics address"`
	Bucket             string        `env:"BUCKET" help:"where sealed segments go: file:///dir, s3://bucket/prefix?endpoint=...&region=..., minio://host:port/bucket/prefix?secure=false (default file://<data dir>-bucket, beside the data dir)"`

	TLSSettings // tls.go: STRATAMQ_TLS_*, STRATAMQ_HTTP_TLS
}

// loadConfig parses the environment (environ, KEY=VALUE) then args as
// flags, and checks every setting (checkConfig): each error names the
// variable or flag at fault, and nothing has been opened yet.
func loadConfig(name string, args []string, environ map[string]string) (Config, *flag.FlagSet, error) {
	return loadConfigTo(name, args, environ, os.Stderr)
}

// loadConfigTo is loadConfig with -h and flag errors printed to out.
func loadConfigTo(name string, args []string, environ map[string]string, out io.Writer) (Config, *flag.FlagSet, error) {
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Prefix: "STRATAMQ_", Environment: environ})
	if err != nil {
		return cfg, nil, envError(err, environ)
	}
	// env applies a default to a variable set empty too; an empty
	// STRATAMQ_HTTP_LISTEN means "no endpoint", as its help says.
	if v, ok := environ["STRATAMQ_HTTP_LISTEN"]; ok && v == "" {
		cfg.HTTPListen = ""
	}
	if v, ok := environ["STRATAMQ_GRPC_LISTEN"]; ok && v == "" {
		cfg.GRPCListen = ""
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	settings := bindFlags(fs, valueOf(&cfg), commandSettings(name))
	fs.Usage = func() { printFlagUsage(fs, name, settings) }
	if err := fs.Parse(args); err != nil {
		return cfg, fs, err
	}
	if fs.NArg() > 0 {
		return cfg, fs, fmt.Errorf("unexpected argument %q (settings are flags or STRATAMQ_ variables)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[flagEnv(f.Name)] = true })
	for k := range environ {
		if strings.HasPrefix(k, "STRATAMQ_") {
			set[strings.TrimPrefix(k, "STRATAMQ_")] = true
		}
	}
	if err := checkConfig(name, cfg, settings, set); err != nil {
		return cfg, fs, err
	}
	return cfg, fs, nil
}

func valueOf(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }

// setting is one env-tagged field: STRATAMQ_<Env> and --<flag>.
type setting struct {
	Env, Flag, Help, Default string
	v                        reflect.Value
}

// flagEnv is the variable name (without STRATAMQ_) of a flag name.
func flagEnv(flagName string) string { return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_")) }

// envError names the variable behind an environment parse error instead
// of the Go field (caarlos0/env reports "field SegmentSize").
func envError(err error, environ map[string]string) error {
	var agg env.AggregateError
	errs := []error{err}
	if errors.As(err, &agg) {
		errs = agg.Errors
	}
	byField := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if tag := f.Tag.Get("env"); tag != "" && tag != "-" {
				byField[f.Name] = tag
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
	var out []string
	for _, e := range errs {
		var pe env.ParseError
		if errors.As(e, &pe) && byField[pe.Name] != "" {
			v := "STRATAMQ_" + byField[pe.Name]
			out = append(out, fmt.Sprintf("%s=%q: %v", v, environ[v], pe.Err))
			continue
		}
		out = append(out, e.Error())
	}
	return errors.New(strings.Join(out, "; "))
}

// checkConfig refuses what parsing accepts but means nothing: an unknown
// log level, a setting explicitly set to 0 where 0 is no value (its
// default is not 0 and its help gives 0 no meaning: STRATAMQ_SEGMENT_SIZE=0
// used to fall back to the default silently), and whatever the broker's
// own Validate refuses (STRATAMQ_FLUSH=maybe), all before any port opens.
func checkConfig(name string, cfg Config, settings []setting, set map[string]bool) error {
	switch strings.ToLower(cfg.LogLevel) {
	case "debug", "info", "warn", "warning", "error":
	default:
		return fmt.Errorf("STRATAMQ_LOG_LEVEL=%q: want debug, info, warn or error", cfg.LogLevel)
	}
	for _, s := range settings {
		if !set[s.Env] || !s.v.IsZero() || s.Default == "" || s.Default == "0" || strings.Contains(s.Help, "0 =") {
			continue
		}
		switch s.v.Kind() {
		case reflect.Int, reflect.Int32, reflect.Int64:
			return fmt.Errorf("STRATAMQ_%s (--%s) is 0: want a positive value, or leave it unset for the default, %s", s.Env, s.Flag, s.Default)
		}
	}
	if _, err := cfg.TLSSettings.load(true); err != nil {
		return err
	}
	if name == "namesrv" {
		return nil
	}
	if err := cfg.Config.Check(); err != nil {
		return err
	}
	if cfg.Bucket != "" {
		if _, err := bucketurl.Parse(cfg.Bucket); err != nil {
			return fmt.Errorf("STRATAMQ_BUCKET=%q: %w", bucketurl.Redacted(cfg.Bucket), err)
		}
	}
	return nil
}

// bindFlags registers one flag per env-tagged field (embedded structs
// included) that only names (nil: every one): STRATAMQ_SEGMENT_SIZE ↔
// --segment-size. It returns the settings in declaration order.
func bindFlags(fs *flag.FlagSet, v reflect.Value, only map[string]bool) []setting {
	var out []setting
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, bindFlags(fs, v.Field(i), only)...)
			continue
		}
		tag := f.Tag.Get("env")
		if tag == "" || tag == "-" || only != nil && !only[tag] {
			continue
		}
		s := setting{Env: tag, Flag: strings.ReplaceAll(strings.ToLower(tag), "_", "-"), Help: f.Tag.Get("help"),
			Default: f.Tag.Get("envDefault"), v: v.Field(i)}
		fs.Var(fieldValue{v.Field(i)}, s.Flag, s.Help+" (STRATAMQ_"+tag+")")
		out = append(out, s)
	}
	return out
}

// fieldValue adapts a struct field to flag.Value.
type fieldValue struct{ v reflect.Value }

func (f fieldValue) String() string {
	if !f.v.IsValid() {
		return ""
	}
	if s, ok := f.v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(f.v.Interface())
}

func (f fieldValue) IsBoolFlag() bool { return f.v.IsValid() && f.v.Kind() == reflect.Bool }

func (f fieldValue) Set(s string) error {
	if u, ok := f.v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch f.v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		f.v.SetInt(int64(d))
		return nil
	}
	switch f.v.Kind() {
	case reflect.String:
		f.v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		f.v.SetInt(n)
	default:
		return fmt.Errorf("unsupported flag type %s", f.v.Type())
	}
	return nil
}
