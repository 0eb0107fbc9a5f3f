package drivers_test

import (
	"testing"

	"github.com/kdefer/kdefer/storage/storagetest"
)

func TestConformanceMem(t *testing.T) { storagetest.Run(t, storagetest.Mem(t)) }

func TestConformanceFile(t *testing.T) { storagetest.Run(t, storagetest.File(t)) }

func TestConformanceVersityGW(t *testing.T) { storagetest.Run(t, storagetest.VersityGW(t)) }

func TestConformanceGoFakeS3(t *testing.T) { storagetest.Run(t, storagetest.GoFakeS3(t)) }

func TestConformanceMinIO(t *testing.T) { storagetest.Run(t, storagetest.MinIO(t)) }

func TestConformanceGCS(t *testing.T) { storagetest.Run(t, storagetest.GCS(t)) }

func TestConformanceAzurite(t *testing.T) { storagetest.Run(t, storagetest.Azurite(t)) }
