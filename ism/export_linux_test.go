package ism

// Punches reports how many times Recommit punched the memory of m beyond its first chunk.
func Punches(m *DMB) int {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	return m.punches
}

// Looks reports how many times Recommit looked for memory of m beyond its first chunk.
func Looks(m *DMB) int {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	return m.looks
}
