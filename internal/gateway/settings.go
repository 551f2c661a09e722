package gateway

import "scistream/internal/gateway/config"

// Config is a gateway's settings; internal/gateway/config documents
// every field, checks them (Validate) and fills in the defaults.
type Config = config.Config

// Resume is how connections over framed WAN legs outlive a lost leg
// (Config.Resume).
type Resume = config.Resume

// ConfigError names the Config field that Validate refused.
type ConfigError = config.Error

// Defaults of Config, as internal/gateway/config gives them.
const (
	DefaultPendingTimeout = config.DefaultPendingTimeout
	DefaultTakeover       = config.DefaultTakeover

	DefaultResumeWindow     = config.DefaultResumeWindow
	DefaultResumeWindowMax  = config.DefaultResumeWindowMax
	DefaultResumeConnBuffer = config.DefaultResumeConnBuffer
	DefaultMaxStripe        = config.DefaultMaxStripe
	MaxMaxStripe            = config.MaxMaxStripe
	DefaultResumeBuffer     = config.DefaultResumeBuffer
)
