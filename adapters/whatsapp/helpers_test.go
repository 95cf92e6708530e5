package whatsapp

import "github.com/silas-gateway/silas/adapters/kit"

func kitLimitsFast() kit.Limits {
	return kit.Limits{PerChatInterval: 1, GroupPerMinute: 1000, GlobalPerSecond: 1000}
}
