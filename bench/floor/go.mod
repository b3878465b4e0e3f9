module fga.local/admission-floor

go 1.22
