package persistence

// SetLoadPage makes LoadServers read pages of n rows until the returned func restores the size.
func SetLoadPage(n int) (restore func()) {
	old := loadPage
	loadPage = n
	return func() { loadPage = old }
}
