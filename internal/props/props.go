// Package props maps RocketMQ-style Java properties files (key=value) onto Go config structs.
// Fields are bound by the `prop:"key"` struct tag; supported kinds are string, bool, the integer
// kinds and time.Duration (written in the file as a Go duration such as "500ms", or as a bare
// integer of the unit named by the `unit:"ms"` or `unit:"s"` tag). Unknown keys are an error
// that names the key. Parsing uses github.com/magiconair/properties.
package props

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"
)

// Load reads the properties file at path into cfg, which must be a pointer to a struct.
func Load(path string, cfg any) error {
	p, err := properties.LoadFile(path, properties.UTF8)
	if err != nil {
		return fmt.Errorf("cannot read config %s: %w", path, err)
	}
	p.DisableExpansion = true
	for _, k := range p.Keys() {
		v, _ := p.Get(k)
		if err := Set(cfg, k, v); err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
	}
	return nil
}

// Keys returns the property keys cfg understands, sorted.
func Keys(cfg any) []string {
	var keys []string
	walk(cfg, func(key string, _ reflect.Value, _ reflect.StructField) bool {
		keys = append(keys, key)
		return true
	})
	sort.Strings(keys)
	return keys
}

// Set parses value into the field of cfg bound to key.
func Set(cfg any, key, value string) error {
	var found bool
	var err error
	walk(cfg, func(k string, v reflect.Value, f reflect.StructField) bool {
		if k != key {
			return true
		}
		found = true
		err = setValue(v, f, strings.TrimSpace(value))
		if err != nil {
			err = fmt.Errorf("key %s: %w", key, err)
		}
		return false
	})
	if !found {
		return fmt.Errorf("unknown key %q (known keys: %s)", key, strings.Join(Keys(cfg), ", "))
	}
	return err
}

// Get returns the value of key formatted as it would be written in a file.
func Get(cfg any, key string) (string, bool) {
	var out string
	var found bool
	walk(cfg, func(k string, v reflect.Value, f reflect.StructField) bool {
		if k != key {
			return true
		}
		found = true
		out = format(v, f)
		return false
	})
	return out, found
}

// Format returns every key=value of cfg, one per line, sorted by key.
func Format(cfg any) string {
	var sb strings.Builder
	for _, k := range Keys(cfg) {
		v, _ := Get(cfg, k)
		fmt.Fprintf(&sb, "%s=%s\n", k, v)
	}
	return sb.String()
}

func walk(cfg any, fn func(key string, v reflect.Value, f reflect.StructField) bool) {
	rv := reflect.ValueOf(cfg)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		key := f.Tag.Get("prop")
		if key == "" || key == "-" {
			continue
		}
		if !fn(key, rv.Field(i), f) {
			return
		}
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

func unitOf(f reflect.StructField) time.Duration {
	switch f.Tag.Get("unit") {
	case "ms":
		return time.Millisecond
	case "s":
		return time.Second
	case "h":
		return time.Hour
	}
	return 0
}

func setValue(v reflect.Value, f reflect.StructField, s string) error {
	if v.Type() == durationType {
		if u := unitOf(f); u != 0 {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				v.SetInt(n * int64(u))
				return nil
			}
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("cannot parse duration %q: %w", s, err)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("cannot parse bool %q: %w", s, err)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("cannot parse integer %q: %w", s, err)
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("cannot parse integer %q: %w", s, err)
		}
		v.SetUint(n)
	default:
		return fmt.Errorf("unsupported field kind %s", v.Kind())
	}
	return nil
}

func format(v reflect.Value, f reflect.StructField) string {
	if v.Type() == durationType {
		d := time.Duration(v.Int())
		if u := unitOf(f); u != 0 && d%u == 0 {
			return strconv.FormatInt(int64(d/u), 10)
		}
		return d.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	}
	return fmt.Sprint(v.Interface())
}
