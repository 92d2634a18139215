package main

import (
	"encoding"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/stratamq/stratamq/broker"
)

// Config is everything `stratamq serve|namesrv|broker` reads. Each field is
// an environment variable STRATAMQ_<env tag> and the kebab-case flag of the
// same name; flags win over the environment.
type Config struct {
	broker.Config
	NamesrvListen string `env:"NAMESRV_LISTEN" envDefault:":9876" help:"name server listen address (serve, namesrv)"`
	HTTPListen    string `env:"HTTP_LISTEN" envDefault:":5557" help:"metrics and health listen address; empty disables"`
	LogLevel      string `env:"LOG_LEVEL" envDefault:"info" help:"debug | info | warn | error"`
	Pprof         bool   `env:"PPROF" help:"serve /debug/pprof/ on the metrics address"`
	Bucket        string `env:"BUCKET" help:"where sealed segments go: file:///dir, s3://bucket/prefix?endpoint=...&region=..., minio://host:port/bucket/prefix?secure=false (default file://<data dir>/bucket)"`
}

// loadConfig parses the environment (environ, KEY=VALUE) then args as flags.
func loadConfig(name string, args []string, environ map[string]string) (Config, *flag.FlagSet, error) {
	cfg, err := env.ParseAsWithOptions[Config](env.Options{Prefix: "STRATAMQ_", Environment: environ})
	if err != nil {
		return cfg, nil, fmt.Errorf("environment: %w", err)
	}
	// env applies a default to a variable set empty too; an empty
	// STRATAMQ_HTTP_LISTEN means "no endpoint", as its help says.
	if v, ok := environ["STRATAMQ_HTTP_LISTEN"]; ok && v == "" {
		cfg.HTTPListen = ""
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	bindFlags(fs, reflect.ValueOf(&cfg).Elem())
	if err := fs.Parse(args); err != nil {
		return cfg, fs, err
	}
	return cfg, fs, nil
}

// bindFlags registers one flag per env-tagged field (embedded structs
// included): STRATAMQ_SEGMENT_SIZE ↔ --segment-size.
func bindFlags(fs *flag.FlagSet, v reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			bindFlags(fs, v.Field(i))
			continue
		}
		tag := f.Tag.Get("env")
		if tag == "" || tag == "-" {
			continue
		}
		name := strings.ReplaceAll(strings.ToLower(tag), "_", "-")
		usage := f.Tag.Get("help") + " (STRATAMQ_" + tag + ")"
		fs.Var(fieldValue{v.Field(i)}, name, usage)
	}
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
