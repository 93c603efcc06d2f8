//go:build !linux

package main

import "errors"

var errNoPinning = errors.New("-pin needs Linux (sched_setaffinity)")

func pinCPUs() (client, server int, err error) { return 0, 0, errNoPinning }

func pinProcess(cpu int) error { return errNoPinning }

func threadPlacement(cpu int) (int, error) { return 0, errNoPinning }

func pinThread(cpu int) (restore func() error, err error) { return nil, errNoPinning }
