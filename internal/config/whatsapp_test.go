package config

import (
	"strings"
	"testing"
	"time"
)

func TestWhatsAppKeys(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		key  string // "" = valid
	}{
		{"disabled by default", nil, ""},
		{"enabled with numbered cards", []string{"SILAS_WHATSAPP_ENABLED=true", "SILAS_WHATSAPP_CARDS=numbered"}, ""},
		{"never edit", []string{"SILAS_WHATSAPP_EDIT_WINDOW=0s"}, ""},
		{"bad cards", []string{"SILAS_WHATSAPP_CARDS=buttons"}, "whatsapp.cards"},
		{"bad dm policy", []string{"SILAS_WHATSAPP_DM_POLICY=everyone"}, "whatsapp.dm_policy"},
		{"edit window past WhatsApp's", []string{"SILAS_WHATSAPP_EDIT_WINDOW=30m"}, "whatsapp.edit_window"},
		{"negative edit window", []string{"SILAS_WHATSAPP_EDIT_WINDOW=-1s"}, "whatsapp.edit_window"},
		{"zero interval", []string{"SILAS_WHATSAPP_LIMITS_PER_CHAT_INTERVAL=0s"}, "whatsapp.limits.per_chat_interval"},
		{"zero group rate", []string{"SILAS_WHATSAPP_LIMITS_GROUP_PER_MINUTE=0"}, "whatsapp.limits.group_per_minute"},
		{"global rate too high", []string{"SILAS_WHATSAPP_LIMITS_GLOBAL_PER_SECOND=50"}, "whatsapp.limits.global_per_second"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load("", tc.env)
			if tc.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.WhatsApp.DMPolicy != "pairing" || c.WhatsApp.Limits.PerChatInterval != 2*time.Second {
					t.Errorf("defaults lost: %+v", c.WhatsApp)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.key+":") {
				t.Fatalf("error %v; want one naming %s", err, tc.key)
			}
		})
	}
}
