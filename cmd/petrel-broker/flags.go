package main

import (
	"github.com/spf13/pflag"

	"github.com/petrel-mq/petrel/broker"
	"github.com/petrel-mq/petrel/internal/props"
)

type pflagFlag = pflag.Flag

func getKey(cfg *broker.Config, key string) (string, bool) { return props.Get(cfg, key) }
