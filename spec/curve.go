package spec

// curve is a cost learned as a function of a size: the time to verify m tokens, or
// to draft k. Each size keeps a decayed average of its observations; a size never
// observed is read off a weighted least-squares line through those that were (or,
// with one observed size, the prior's shape scaled through it); and the estimate is
// made non-decreasing in the size, averaging neighbours that disagree. Doing more
// never takes less time, but noise and a machine whose speed drifts can make one
// size's average look cheaper than a smaller one's: read as it is, a draft of one
// token could look cheaper to verify than a plain step, and be chosen where its drafts
// are useless.
type curve struct {
	at    []bucket            // by size, 1 … len−1 (index 0 unused)
	prior func(x int) float64 // the shape assumed before evidence, up to a factor
	est   []float64           // the estimate by size, while fresh
	fresh bool
	// Scratch space of estimate: a decoder step allocates nothing.
	weight []float64
	pool   []pooled
}

// pooled is a run of sizes whose estimates isotonic averaged together.
type pooled struct {
	mean, weight float64
	n            int
}

func newCurve(sizes int, prior func(x int) float64) curve {
	return curve{at: make([]bucket, sizes+1), prior: prior, est: make([]float64, sizes+1), weight: make([]float64, sizes+1), pool: make([]pooled, 0, sizes)}
}

// add learns that size x took v (clipped as bucket.add does).
func (c *curve) add(x int, v float64) {
	c.at[max(1, min(x, len(c.at)-1))].add(v)
	c.fresh = false
}

// learned reports whether some size has been observed.
func (c *curve) learned() bool {
	for _, b := range c.at {
		if b.weight > 0 {
			return true
		}
	}
	return false
}

// time is the estimated time of size x (clamped to the sizes learned).
func (c *curve) time(x int) float64 {
	if !c.fresh {
		c.estimate()
		c.fresh = true
	}
	return c.est[max(1, min(x, len(c.est)-1))]
}

// timeAt is time between whole sizes, by linear interpolation.
func (c *curve) timeAt(x float64) float64 {
	lo := max(1, min(int(x), len(c.at)-1))
	t := c.time(lo)
	if f := x - float64(lo); f > 0 && lo+1 < len(c.at) {
		t += f * (c.time(lo+1) - t)
	}
	return t
}

// clone returns a copy that learns on its own.
func (c curve) clone() curve {
	n := newCurve(len(c.at)-1, c.prior)
	copy(n.at, c.at)
	return n
}

// estimate works out the estimate of every size: raw, then made non-decreasing.
func (c *curve) estimate() {
	for x := 1; x < len(c.at); x++ {
		c.est[x], c.weight[x] = c.raw(x), 0.5
		if b := c.at[x]; b.weight > 0.5 {
			c.weight[x] = b.weight
		}
	}
	c.pool = isotonic(c.est, c.weight, c.pool[:0])
}

// raw is the estimate of size x before it is made monotone: its average where it has
// some weight, else a line through the observed sizes, or the prior.
func (c *curve) raw(x int) float64 {
	if b := c.at[x]; b.weight > 0.5 {
		return b.mean
	}
	var sw, sx, sy, sxx, sxy float64
	var n int
	for i, b := range c.at {
		if b.weight <= 0 {
			continue
		}
		w := min(b.weight, 10)
		sw += w
		sx += w * float64(i)
		sy += w * b.mean
		sxx += w * float64(i*i)
		sxy += w * float64(i) * b.mean
		n++
	}
	switch n {
	case 0:
		return c.prior(x) // unitless: only ratios matter
	case 1:
		x0 := int(sx / sw)
		return sy / sw * c.prior(x) / c.prior(x0)
	}
	slope := (sw*sxy - sx*sy) / (sw*sxx - sx*sx)
	icpt := (sy - slope*sx) / sw
	if t := icpt + slope*float64(x); t > 0 {
		return t
	}
	return sy / sw
}

// isotonic makes y[1:] the non-decreasing sequence closest to it in least squares
// weighted by w (y[0] is unused): runs of values that decrease are replaced by their
// weighted mean until none does (pooling adjacent violators). It returns the pool, for
// reuse.
func isotonic(y, w []float64, pool []pooled) []pooled {
	for i := 1; i < len(y); i++ {
		b := pooled{y[i], w[i], 1}
		for len(pool) > 0 && pool[len(pool)-1].mean > b.mean {
			p := pool[len(pool)-1]
			pool = pool[:len(pool)-1]
			wt := p.weight + b.weight
			b = pooled{(p.mean*p.weight + b.mean*b.weight) / wt, wt, p.n + b.n}
		}
		pool = append(pool, b)
	}
	i := 1
	for _, b := range pool {
		for range b.n {
			y[i] = b.mean
			i++
		}
	}
	return pool
}
